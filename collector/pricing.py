"""Cost of a model call in USD (design §3).

Prices come from genai-prices (the maintained library, bundled snapshot); a user price file can
override or add models. Each token is charged once at its own rate: uncached input at the input
rate, cache reads and cache writes at theirs (at the input rate when the model has none), output
including reasoning at the output rate. Tiered prices follow genai-prices (the tier reached by
the call's input tokens applies to all tokens of that kind).

Model names resolve with provider prefixes (``openai/gpt-4o``, ``converse/...``) and date
suffixes (``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``, ``...@20250929``). A model with
no known price is *unpriced*: :func:`cost_usd` returns None, never 0.

User price file (YAML, JSON or TOML by extension; path from the argument, else the environment
variable ``BUDGETLENS_PRICES_FILE``)::

    models:
      my-finetune:                    # matched case-insensitively, after prefix/date stripping
        input_usd_per_mtok: 1.0       # required
        output_usd_per_mtok: 4.0      # required
        cache_read_usd_per_mtok: 0.1  # optional (default: input rate)
        cache_write_usd_per_mtok: 1.25

Units are explicit in each key: ``_usd_per_mtok`` (per million tokens), ``_usd_per_ktok`` or
``_usd_per_token``. Unknown keys or units raise ``ValueError`` naming them.

Resolution is cached (``functools.lru_cache``): after the first call for a model, pricing a call
is a few float multiplications.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from datetime import UTC
from functools import lru_cache
from pathlib import Path
from typing import Any

from budgetlens.config import ENV_PRICES_FILE
from budgetlens.docfile import load_document
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

__all__ = [
    "ModelRates",
    "check_prices_file",
    "clear_price_cache",
    "cost_usd",
    "load_price_file",
    "model_rates",
    "paid_call_cost_usd",
]

#: A rate schedule: ((threshold_input_tokens, usd_per_token), ...) ascending; the first has -1.
Schedule = tuple[tuple[int, float], ...]

_KINDS = ("input", "output", "cache_read", "cache_write")
_UNITS = {"_usd_per_mtok": 1e-6, "_usd_per_ktok": 1e-3, "_usd_per_token": 1.0}

#: OTel gen_ai.provider.name values (and common spellings) -> genai-prices provider ids.
_PROVIDER_IDS = {
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "converse": "aws",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "gemini": "google",
    "vertex_ai": "google",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "mistral_ai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
}
_DATE_SUFFIX = re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|@latest|-latest)$")
_BEDROCK_VERSION = re.compile(r"-v\d+(:\d+)?$")


@dataclass(frozen=True, slots=True)
class ModelRates:
    """Resolved prices of one model, USD per token. ``cache_read``/``cache_write`` None = input rate.

    ``source`` is ``"genai-prices:<provider>/<model id>"`` or ``"user:<file>"``;
    ``request_usd`` is a per-request fee (0 for most models).
    """

    input: Schedule
    output: Schedule
    cache_read: Schedule | None
    cache_write: Schedule | None
    request_usd: float
    source: str

    def cost(self, usage: Usage) -> float:
        """USD for ``usage``: each token charged once at its own rate."""
        inp = usage.input_tokens
        cr = usage.cache_read_tokens if self.cache_read is not None else 0
        cw = usage.cache_write_tokens if self.cache_write is not None else 0
        total = _rate(self.input, inp) * (inp - cr - cw) + _rate(self.output, inp) * usage.output_tokens
        if cr:
            total += _rate(self.cache_read, inp) * cr
        if cw:
            total += _rate(self.cache_write, inp) * cw
        return total + self.request_usd

    def estimate(self, tokens: int, output_tokens: int | None = None) -> float:
        """Worst-case USD of a call estimated at ``tokens`` (input + output), cache ignored:
        ``output_tokens`` of them at the output rate and the rest at the input rate; when the
        split is unknown (None), all at the higher of the two."""
        if output_tokens is None:
            return max(self.cost(Usage(tokens, 0)), self.cost(Usage(0, tokens)))
        return self.cost(Usage(tokens - output_tokens, output_tokens))


def _rate(schedule: Schedule, input_tokens: int) -> float:
    if len(schedule) == 1:
        return schedule[0][1]
    for start, price in reversed(schedule):
        if input_tokens > start:
            return price
    return schedule[0][1]


def _schedule_from_genai(value: Any) -> Schedule | None:
    if value is None:
        return None
    tiers = getattr(value, "tiers", None)
    if tiers is None:
        return ((-1, float(value) / 1e6),)
    return ((-1, float(value.base) / 1e6),) + tuple((t.start, float(t.price) / 1e6) for t in tiers)


def _name_variants(model: str) -> list[str]:
    """``model`` lower-cased, then without each provider prefix, each without a date suffix."""
    name = model.strip().lower()
    names = [name]
    while "/" in name:
        name = name.split("/", 1)[1]
        names.append(name)
    for n in list(names):
        for pattern in (_BEDROCK_VERSION, _DATE_SUFFIX):
            stripped = pattern.sub("", n)
            if stripped != n and stripped not in names:
                names.append(stripped)
                n = stripped
    return names


def _genai_rates(model: str, provider: str | None) -> ModelRates | None:
    from datetime import datetime

    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    provider_id = _PROVIDER_IDS.get((provider or "").lower(), (provider or "").lower() or None)
    prefix = model.split("/", 1)[0].lower() if "/" in model else None
    provider_ids = [provider_id, _PROVIDER_IDS.get(prefix, prefix) if prefix else None, None]
    for name in _name_variants(model):
        for pid in dict.fromkeys(provider_ids):
            try:
                found_provider, info = snapshot.find_provider_model(name, None, pid, None)
            except LookupError:
                continue
            price = info.get_prices(datetime.now(tz=UTC))
            inp, out = _schedule_from_genai(price.input_mtok), _schedule_from_genai(price.output_mtok)
            if inp is None or out is None:
                continue
            requests = getattr(price, "requests_kcount", None)
            return ModelRates(
                input=inp,
                output=out,
                cache_read=_schedule_from_genai(price.cache_read_mtok),
                cache_write=_schedule_from_genai(price.cache_write_mtok),
                request_usd=float(requests) / 1000 if requests is not None else 0.0,
                source=f"genai-prices:{found_provider.id}/{info.id}",
            )
    return None


def _parse_price_entry(model: str, entry: Any, path: str) -> ModelRates:
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: models.{model} must be a mapping of <kind>_usd_per_<unit> keys")
    rates: dict[str, Schedule] = {}
    for key, value in entry.items():
        kind, scale = None, None
        for suffix, factor in _UNITS.items():
            if str(key).endswith(suffix) and str(key)[: -len(suffix)] in _KINDS:
                kind, scale = str(key)[: -len(suffix)], factor
        if kind is None:
            raise ValueError(
                f"{path}: models.{model}: unknown key {key!r}; expected <kind>_usd_per_<unit> with "
                f"kind in {_KINDS} and unit in {tuple(u[9:] for u in _UNITS)}"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{path}: models.{model}.{key} must be a finite number >= 0, got {value!r}")
        if kind in rates:
            raise ValueError(f"{path}: models.{model}: {kind} price given twice (key {key!r})")
        rates[kind] = ((-1, float(value) * scale),)
    missing = [k for k in ("input", "output") if k not in rates]
    if missing:
        raise ValueError(f"{path}: models.{model}: missing {', '.join(m + '_usd_per_mtok' for m in missing)}")
    return ModelRates(
        rates["input"],
        rates["output"],
        rates.get("cache_read"),
        rates.get("cache_write"),
        0.0,
        f"user:{path}",
    )


def load_price_file(path: str | os.PathLike) -> dict[str, ModelRates]:
    """Read a user price file (YAML/JSON/TOML by extension) -> {lower-case model name: rates}.

    Raises ``ValueError`` naming the key for unknown keys, units or bad values, and for an
    unsupported extension; ``FileNotFoundError`` when the file is missing.
    """
    p = Path(path)
    doc = load_document(p, "price file")
    if not isinstance(doc, dict) or set(doc) - {"models"}:
        extra = sorted(set(doc) - {"models"}) if isinstance(doc, dict) else doc
        raise ValueError(f"{p}: a price file has one top-level key 'models'; unknown: {extra}")
    models = doc.get("models") or {}
    if not isinstance(models, dict):
        raise ValueError(f"{p}: 'models' must be a mapping of model name -> prices")
    return {str(name).lower(): _parse_price_entry(str(name), e, str(p)) for name, e in models.items()}


@lru_cache(maxsize=16)
def _user_table(path: str) -> dict[str, ModelRates]:
    table = load_price_file(path)
    log.info("loaded %d model prices from %s", len(table), path)
    return table


@lru_cache(maxsize=4096)
def _resolve(model: str, provider: str | None, prices_file: str | None) -> ModelRates | None:
    if prices_file:
        table = _user_table(prices_file)
        for name in _name_variants(model):
            if name in table:
                return table[name]
    rates = _genai_rates(model, provider)
    if rates is None:
        log.info("no price for model %r (provider %r): unpriced", model, provider)
    return rates


def _configured(prices_file: str | os.PathLike | None) -> str | None:
    path = prices_file if prices_file is not None else os.environ.get(ENV_PRICES_FILE) or None
    return str(path) if path else None


def check_prices_file(prices_file: str | os.PathLike | None = None) -> None:
    """Read (and cache) the user price file now, so a bad one fails before any call is paid for.

    ``prices_file`` defaults to ``BUDGETLENS_PRICES_FILE``; nothing to do when neither is set.
    Raises ValueError naming the file (and the variable when it came from there) when it is
    missing, unreadable or invalid.
    """
    path = _configured(prices_file)
    if not path:
        return
    origin = f" (from {ENV_PRICES_FILE})" if prices_file is None else ""
    try:
        _user_table(path)
    except OSError as error:
        raise ValueError(f"price file {path}{origin} cannot be read: {error}") from error
    except ValueError as error:
        raise ValueError(f"{error}{origin}") from error


def model_rates(
    model: str, provider: str | None = None, prices_file: str | os.PathLike | None = None
) -> ModelRates | None:
    """The resolved prices of ``model`` (user file first, then genai-prices), or None if unpriced.

    ``prices_file`` defaults to ``BUDGETLENS_PRICES_FILE``. Cached per (model, provider, file).
    """
    return _resolve(model, provider, _configured(prices_file))


def cost_usd(
    model: str | None,
    usage: Usage | None,
    provider: str | None = None,
    prices_file: str | os.PathLike | None = None,
) -> float | None:
    """Cost of one call in USD (float >= 0), or None when the model is unpriced or usage unknown.

    ``usage`` is a normalized :class:`~budgetlens.usage.Usage`; ``provider`` an OTel
    ``gen_ai.provider.name`` or genai-prices provider id that narrows the lookup. Prices from the
    user price file (``prices_file`` or ``BUDGETLENS_PRICES_FILE``), else genai-prices.
    """
    if not model or usage is None:
        return None
    rates = model_rates(model, provider, prices_file)
    return None if rates is None else rates.cost(usage)


def paid_call_cost_usd(model: str | None, usage: Usage | None, provider: str | None = None) -> float | None:
    """:func:`cost_usd` of a call that was already paid for: a pricing failure (e.g. a price file
    that became unreadable) is logged and gives None (unpriced) instead of raising, so the
    caller can still count the call's tokens."""
    try:
        return cost_usd(model, usage, provider)
    except Exception:
        log.exception("could not price model %r; the call counts as unpriced", model)
        return None


def clear_price_cache() -> None:
    """Forget resolved models and loaded price files (after editing a price file)."""
    _resolve.cache_clear()
    _user_table.cache_clear()
