"""Cost of a model call in USD (design §3): one price path, genai-prices' own calculation.

:func:`price_call` is the one path every caller uses (the guard's ``record`` and ``reserve``,
the collector's mapping, the importers, ``budgetlens reprice``); :func:`cost_usd` is its public
shortcut. The cost is ``genai_prices`` ``ModelInfo.calc_price`` / ``ModelPrice.calc_price`` over
the whole normalized :class:`~budgetlens.usage.Usage` (tokens by kind and modality, cache writes
by duration, server-side tool use such as web searches, per-request fees, tiers by context
length), at the price in force at the call's time (``at``, default now) and with the call's
service tier as the price context. budgetlens never re-derives a cost from copied rates.

Error policy (one, for every caller):

- an unknown model is *unpriced*: ``cost_usd`` None, never $0; it is logged once per name at
  WARNING;
- a usage dimension the model has no price for (e.g. web searches on a model without a search
  fee) makes the call *partly unpriced*: the cost is the priced part and
  :attr:`CallPrice.unpriced` names the dimensions left out, never a silent $0 for them;
- a call genai-prices cannot price (an inconsistent usage), or a user price file that is
  missing or invalid when a call is priced, is logged at WARNING and unpriced;
- :func:`price_call` never raises for a price: every unpriced call says why
  (:attr:`CallPrice.unpriced_reason`). Only :func:`check_prices_file` and
  :func:`load_price_file` raise for a bad user price file (``ValueError`` naming the file, key and
  rule): the guard and the importers call it before any call is paid for.

Model names resolve as ``budgetlens.price_names`` describes (prefixes and date suffixes
stripped, the dated entry first).

Resolved once, applied to many calls (issue 25): the price in force for a (provider, model,
conditional price and variant in force at the call's time, service tier), or a user price
file's model, is resolved once per process and kept. When it is linear in every usage field
(no ``TieredPrices``), its per-call fee and per-field rates come from genai-prices' own
calculation on unit usages (``budgetlens.price_rates``; kept in ``budgetlens.price_linear``), and
calls are priced by rates x counts in ``Decimal``; a tiered price, or a call genai-prices would treat otherwise (an audio part
without an audio rate, a usage it refuses), keeps the per-call ``calc_price``. Both give the
same figure (the tests compare them on random usages). :func:`price_calls` prices a batch (the
collector's span mapping) through the same path.

User price file (YAML, JSON or TOML; path from the argument, else the environment variable
``BUDGETLENS_PRICES_FILE``): its format, checks and lookup are in ``budgetlens.price_file``; its
prices win over genai-prices for the models it names.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from budgetlens.billing_parts import unpriced_audio, unpriced_fields, without_parts
from budgetlens.price_columns import usage_details, usage_from_details
from budgetlens.price_file import UserModel, check_prices_file, genai_usage, load_price_file, user_table
from budgetlens.price_file import configured_file as _configured
from budgetlens.price_file import user_model as _user_model
from budgetlens.price_linear import PRICE_ERRORS as _PRICE_ERRORS
from budgetlens.price_linear import UNSET as _UNSET
from budgetlens.price_linear import genai_calc as _genai_calc
from budgetlens.price_linear import linear_cost as _linear_cost
from budgetlens.price_linear import now_rates as _now_rates
from budgetlens.price_linear import rates as _rates
from budgetlens.price_linear import remember as _remember
from budgetlens.price_names import clear_names, warn_unpriced
from budgetlens.price_resolve import by_day as _by_day
from budgetlens.price_resolve import resolve_genai as _resolve
from budgetlens.price_resolve import today as _today
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

__all__ = [
    "CallPrice",
    "PriceRequest",
    "check_prices_file",
    "clear_price_cache",
    "cost_usd",
    "estimate_cost_usd",
    "load_price_file",
    "price_call",
    "price_calls",
    "price_columns",
    "price_version",
    "usage_details",
    "usage_from_details",
]


@dataclass(frozen=True, slots=True)
class CallPrice:
    """The price of one call.

    ``cost_usd``: USD (float >= 0) of the priced part, None when the model is unpriced or the
    usage unknown. ``unpriced``: Usage fields the call reported that the model has no price for
    (e.g. ``("web_search_requests",)``); non-empty = the call is partly unpriced. ``source``:
    ``"genai-prices:<provider>/<model id>"`` or ``"user:<file>"``. ``price_version``: which
    prices priced it (``"genai-prices <version>"`` or ``"user:<file>#<sha256 prefix>"``), stored
    with the row so that only a deliberate ``budgetlens reprice`` changes old costs.
    ``unpriced_reason``: why the call is unpriced or partly unpriced (``"no model"``,
    ``"usage unknown"``, ``"no price for model 'x'"``, ``"could not price: <error>"``,
    ``"no price for web_search_requests"``); None for a fully priced call.
    """

    cost_usd: float | None
    unpriced: tuple[str, ...] = ()
    source: str | None = None
    price_version: str | None = None
    unpriced_reason: str | None = None


_warm = False


def warm_prices() -> None:
    """Load genai-prices' data now (about a second, once per process) instead of at the first
    priced call. ``RunBudget`` calls it before its clock starts, so the first run of a process
    does not carry the load in its ``duration_s``. Never raises: a failure shows at pricing."""
    global _warm
    if _warm:
        return
    _warm = True
    try:
        from genai_prices import data_snapshot

        data_snapshot.get_snapshot()
        cost_usd("gpt-4o", Usage(1, 1), "openai")  # and the calculation's own first-use imports
    except Exception:  # a pricing problem is reported where a call is priced
        log.debug("warming genai-prices failed", exc_info=True)


_version: list[str] = []


def price_version() -> str:
    """The version of the bundled genai-prices data that prices calls (``"genai-prices 0.2.3"``)."""
    if not _version:
        import genai_prices

        _version.append(f"genai-prices {genai_prices.__version__}")
    return _version[0]


# --- usage -> genai-prices ----------------------------------------------------------------------


def _price_context(usage: Usage) -> dict[str, str] | None:
    tier = getattr(usage, "service_tier", None)
    if not tier:
        return None
    # Anthropic states batch processing as its service tier; genai-prices keys it "processing".
    return {"service_tier": tier, "processing": "batch"} if tier == "batch" else {"service_tier": tier}


def _as_utc(at: dt.datetime | None) -> dt.datetime:
    if at is None:
        return dt.datetime.now(tz=dt.UTC)
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)  # naive = UTC (the store's)


# --- the one price path -------------------------------------------------------------------------


def price_call(
    model: str | None,
    usage: Usage | None,
    provider: str | None = None,
    *,
    at: dt.datetime | None = None,
    prices_file: str | os.PathLike | None = None,
) -> CallPrice:
    """Price one call with genai-prices' own calculation (see the module docstring).

    ``usage``: a normalized :class:`~budgetlens.usage.Usage` (None = unknown usage: unpriced);
    ``provider``: an OTel ``gen_ai.provider.name`` or genai-prices provider id that narrows the
    lookup; ``at``: when the call was made (aware datetime, or naive UTC; default now): the price
    in force then applies. Prices from the user price file (``prices_file``, else
    ``BUDGETLENS_PRICES_FILE``) first, else genai-prices. Returns a :class:`CallPrice`; never
    raises for a price: an unpriced call has ``cost_usd`` None and says why in
    ``unpriced_reason`` (a price file or calculation that fails is logged at WARNING).
    """
    return _price_one(model, usage, provider, at, prices_file, None)


def _price_one(
    model: str | None,
    usage: Usage | None,
    provider: str | None,
    at: dt.datetime | None,
    prices_file: str | os.PathLike | None,
    batch: _Batch | None,
) -> CallPrice:
    """:func:`price_call`, sharing lookups with the other calls of ``batch`` (when given)."""
    if not model:
        return CallPrice(None, unpriced_reason="no model")
    if usage is None:
        return CallPrice(None, unpriced_reason="usage unknown")
    try:
        return _price(model, usage, provider, at, prices_file, batch)
    except _PRICE_ERRORS as error:
        log.warning("could not price a call of %r: %s; the call counts as unpriced", model, error)
        return CallPrice(None, unpriced_reason=f"could not price: {error}")


def _price(
    model: str,
    usage: Usage,
    provider: str | None,
    at: dt.datetime | None,
    prices_file: str | os.PathLike | None,
    batch: _Batch | None = None,
) -> CallPrice:
    """:func:`price_call` for a model and a usage; raises ``_PRICE_ERRORS``. ``batch``: the
    lookups the calls of one :func:`price_calls` share."""
    path = _configured(prices_file) if batch is None else batch.path
    if path:
        user = _user_model(model, path)
        if user is not None:
            return _price_user(model, usage, user)
    when = _as_utc(at)
    resolved = _resolve(model, provider, usage.service_tier, when)
    if resolved is None:
        warn_unpriced(model, provider)
        return CallPrice(None, unpriced_reason=f"no price for model {model!r}")
    genai_provider, info, key, source = resolved
    rates = _rates.get(key, _UNSET)
    if rates is _UNSET:
        price_context = _price_context(usage)
        rates = _remember(key, lambda u: _genai_calc(info, genai_provider, u, when, price_context))
    if rates is not None:
        fast = rates.cost(usage)
        if fast is not None:
            return _priced(model, fast[0], fast[1], source, price_version())
    context = _price_context(usage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown usage key is reported as unpriced below
        calc = info.calc_price(
            genai_usage(usage), genai_provider, genai_request_timestamp=when, price_context=context
        )
        audio = unpriced_audio(usage, calc.model_price)
        if audio:  # the text part is priced; the audio part is named unpriced, never text-rated
            calc = info.calc_price(
                genai_usage(without_parts(usage, audio)),
                genai_provider,
                genai_request_timestamp=when,
                price_context=context,
            )
    return _priced(
        model, float(calc.total_price), unpriced_fields(usage, calc.model_price), source, price_version()
    )


_warned_partly: set[tuple[str, tuple[str, ...]]] = set()


def _priced(model: str, cost: float, unpriced: tuple[str, ...], source: str, version: str) -> CallPrice:
    if not unpriced:
        return CallPrice(cost, (), source, version)
    if (model, unpriced) not in _warned_partly:
        _warned_partly.add((model, unpriced))
        log.warning(
            "model %r has no price for %s (%s): those parts of its calls are unpriced",
            model,
            ", ".join(unpriced),
            source,
        )
    return CallPrice(cost, unpriced, source, version, f"no price for {', '.join(unpriced)}")


def _price_user(model: str, usage: Usage, user: UserModel) -> CallPrice:
    key = ("user", user.version, user.source, repr(user.prices))
    rates = _rates.get(key, _UNSET)
    if rates is _UNSET:
        price = user.model_price()
        rates = _remember(key, lambda u: (price.calc_price(u)["total_price"], price))
    if rates is not None:
        fast = rates.cost(usage)
        if fast is not None:
            return _priced(model, fast[0], fast[1], user.source, user.version)
    model_price = user.model_price()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = model_price.calc_price(genai_usage(usage))
    return _priced(
        model, float(result["total_price"]), unpriced_fields(usage, model_price), user.source, user.version
    )


@dataclass(frozen=True, slots=True)
class PriceRequest:
    """One call to price in a batch (:func:`price_calls`): the arguments of :func:`price_call`."""

    model: str | None
    usage: Usage | None
    provider: str | None = None
    at: dt.datetime | None = None


def price_calls(
    calls: Iterable[PriceRequest], *, prices_file: str | os.PathLike | None = None
) -> list[CallPrice]:
    """Price a batch of calls (e.g. the model-call spans of one OTLP body): one
    :class:`CallPrice` per request, in order, each equal to :func:`price_call`'s. Each
    (provider, model, price in force, tier) is resolved once and its calls priced by rates x
    counts where the price is linear (see the module docstring). Never raises for a price."""
    batch = _Batch(_configured(prices_file))
    return [_price_one(c.model, c.usage, c.provider, c.at, prices_file, batch) for c in calls]


class _Batch:
    """What the calls of one :func:`price_calls` batch share: the user price file in effect (each
    model's genai-prices entry and prices in force are kept per UTC date by ``_resolve``)."""

    def __init__(self, path: str | None) -> None:
        self.path = path


def cost_usd(
    model: str | None,
    usage: Usage | None,
    provider: str | None = None,
    prices_file: str | os.PathLike | None = None,
    *,
    at: dt.datetime | None = None,
) -> float | None:
    """Cost of one call in USD (float >= 0), or None when the model is unpriced or usage unknown.

    The ``cost_usd`` of :func:`price_call` (same arguments, same error policy): a partly
    unpriced call gives its priced part; use :func:`price_call` to see what was left out.
    """
    if model and usage is not None:
        fast = _linear_cost(model, usage, provider, None if at is None else _as_utc(at), prices_file)
        if fast is not None:
            return fast
    return price_call(model, usage, provider, at=at, prices_file=prices_file).cost_usd


def estimate_cost_usd(
    model: str | None,
    tokens: int,
    output_tokens: int | None = None,
    provider: str | None = None,
    *,
    at: dt.datetime | None = None,
) -> float | None:
    """Worst-case USD of a call estimated at ``tokens`` (input + output, cache ignored), through
    :func:`price_call`: ``output_tokens`` of them as output and the rest as input; unsplit
    (None), all at whichever of the two costs more. None when the model is unpriced."""
    if output_tokens is not None:
        return cost_usd(model, Usage(tokens - output_tokens, output_tokens), provider, at=at)
    as_input = cost_usd(model, Usage(tokens, 0), provider, at=at)
    as_output = cost_usd(model, Usage(0, tokens), provider, at=at)
    if as_input is None or as_output is None:
        return None
    return max(as_input, as_output)


def price_columns(
    model: str | None, usage: Usage | None, provider: str | None = None, *, at: dt.datetime | None = None
) -> dict[str, Any]:
    """The ``model_calls`` pricing columns of one call priced by :func:`price_call`:
    ``cost_usd``, ``price_version``, ``usage_details``, ``unpriced_parts``."""
    priced = price_call(model, usage, provider, at=at)
    return {
        "cost_usd": priced.cost_usd,
        "price_version": priced.price_version,
        "usage_details": usage_details(usage),
        "unpriced_parts": ",".join(priced.unpriced) or None,
    }


def clear_price_cache() -> None:
    """Forget resolved models and their rates, loaded price files and the models already warned
    about."""
    clear_names()
    user_table.cache_clear()
    _rates.clear()
    _now_rates.clear()
    _by_day.clear()
    _today.clear()
    _warned_partly.clear()
