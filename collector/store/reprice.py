"""Re-price stored calls deliberately (``budgetlens reprice``): the only way an old cost changes.

Every call budgetlens priced carries the ``price_version`` that priced it
(``model_calls.price_version``). After a genai-prices upgrade or a price-file edit, a re-price
recomputes, through the one price path (:func:`budgetlens.pricing.price_call`, at each call's
own start time), the calls priced with another version and the calls left unpriced although
their usage is known, then rebuilds the run rollups. Costs a source stated (Claude Code
``costUSD``, OpenHands, SWE-agent) and costs the guard attached to its spans have no
``price_version`` and are never changed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from budgetlens.store import lake, sql
from budgetlens.store.connection import write_connection
from budgetlens.store.writer import rebuild_runs

log = logging.getLogger(__name__)

__all__ = ["RepriceResult", "reprice"]


@dataclass(frozen=True, slots=True)
class RepriceResult:
    """What a re-price did (or, with ``dry_run``, would do).

    ``candidates``: calls examined; ``changed``: calls whose cost, price version or unpriced
    parts changed; ``newly_priced``: calls unpriced before and priced now; ``cost_before_usd`` /
    ``cost_after_usd``: the sum of the examined calls' costs (USD, unpriced = 0 in the sum);
    ``price_version``: the current version.
    """

    candidates: int
    changed: int
    newly_priced: int
    cost_before_usd: float
    cost_after_usd: float
    price_version: str


def reprice(path: str | os.PathLike, *, dry_run: bool = False) -> RepriceResult:
    """Re-price the calls of the store at ``path`` priced with another price version (see the
    module docstring); with ``dry_run`` nothing is written. Prices from genai-prices and the user
    price file (``BUDGETLENS_PRICES_FILE``), which is validated first.

    Raises ValueError for a bad price file, StoreError when the store cannot be opened for
    writing (e.g. a collector holds it: stop it first).
    """
    from budgetlens.pricing import check_prices_file, price_call, price_version, usage_from_details

    if not Path(path).exists():
        raise ValueError(f"{path}: no store there, nothing to re-price")
    check_prices_file()
    current = price_version()
    changed, newly, before, after, rows = [], 0, 0.0, 0.0, 0
    with write_connection(path) as conn:
        cursor = conn.execute(sql.SELECT_REPRICE_CANDIDATES, [current])
        columns = [d[0] for d in cursor.description]
        for values in cursor.fetchall():
            row = dict(zip(columns, values))
            rows += 1
            usage = usage_from_details(row)
            priced = price_call(row["model"], usage, row["provider_name"], at=row["start_utc"])
            unpriced = ",".join(priced.unpriced) or None
            before += row["cost_usd"] or 0.0
            after += priced.cost_usd or 0.0
            if row["cost_usd"] is None and priced.cost_usd is not None:
                newly += 1
            if (priced.cost_usd, priced.price_version) != (row["cost_usd"], row["price_version"]):
                changed.append((priced.cost_usd, priced.price_version, unpriced, row["span_id"]))
        if changed and not dry_run:
            conn.execute("BEGIN TRANSACTION")
            try:
                conn.executemany(sql.UPDATE_CALL_PRICE, changed)
                conn.execute("COMMIT")
            except Exception:
                lake.rollback(conn)
                raise
            rebuild_runs(conn)
            log.info("re-priced %d calls with %s", len(changed), current)
    return RepriceResult(rows, len(changed), newly, before, after, current)
