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
- a call genai-prices cannot price (an inconsistent usage) is logged at WARNING and unpriced;
- only a bad user price file raises (``ValueError`` naming the file, key and rule): it is read
  when the guard is built or an import starts (:func:`check_prices_file`).

Model names resolve as genai-prices matches them, then without provider and region prefixes
(``openai/``, ``bedrock/``, ``us.``, ``global.``, ``anthropic.``) and version or date suffixes
(``-2025-08-07``, ``-20250929``, ``-0315``, ``@20250514``, ``:0``, ``-v1:0``, ``-latest``): the
full (dated) name first, so a dated entry wins over its base model.

User price file (YAML, JSON or TOML by extension; path from the argument, else the environment
variable ``BUDGETLENS_PRICES_FILE``): ``models`` maps a model name (matched case-insensitively,
after prefix/suffix stripping) to prices keyed ``<dimension>_usd_per_<unit>``::

    models:
      my-finetune:
        input_usd_per_mtok: 1.0              # required
        output_usd_per_mtok: 4.0             # required
        cache_read_usd_per_mtok: 0.1         # optional; unpriced parts fall back as in genai-prices
        cache_write_usd_per_mtok: 1.25       # 5-minute writes; cache_write_1h_usd_per_mtok: 2.0
        input_audio_usd_per_mtok: 40         # per modality: input_/output_ audio, image, video
        web_searches_usd_per_kcount: 10      # server-side tool use, per 1,000
        requests_usd_per_count: 0.001        # a per-request fee
        input_usd_per_mtok_tiers: ...        # see below
    allow_implausible_prices: false          # true: skip the plausibility check (also per model)

Dimensions are genai-prices' usage keys: token kinds without ``_tokens`` (``input``, ``output``,
``cache_read``, ``cache_write``, ``cache_write_1h``, ``input_audio``, ``output_image``,
``cache_audio_read``, ...) with units ``mtok`` (per million), ``ktok`` or ``token``; counts
(``web_searches``, ``code_executions``, ``requests``, ...) with ``kcount`` (per 1,000) or
``count``. A tiered price is a mapping ``{base: 1.25, tiers: [{above_input_tokens: 200000,
price: 2.5}]}`` in the key's unit (genai-prices semantics: the tier reached by the call's input
tokens applies to all its tokens of that kind). A token price above the highest any model in
genai-prices charges (a per-million figure in a per-token key, a factor of 1,000 or 10^6 off) is
refused with the key and the plausible unit, unless ``allow_implausible_prices: true``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from budgetlens.config import ENV_PRICES_FILE, load_document, resolve
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

__all__ = [
    "CallPrice",
    "check_prices_file",
    "clear_price_cache",
    "cost_usd",
    "estimate_cost_usd",
    "load_price_file",
    "price_call",
    "price_columns",
    "price_version",
    "usage_details",
    "usage_from_details",
]

#: OTel gen_ai.provider.name values (and common spellings) -> genai-prices provider ids.
_PROVIDER_IDS = {
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "bedrock_converse": "aws",
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
#: Version and date suffixes, stripped one at a time (the full name is always tried first).
_SUFFIXES = (
    re.compile(r"-v\d+(:\d+)?$"),  # Bedrock -v1:0
    re.compile(r":\d+$"),  # Bedrock :0
    re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|@latest|-latest|@\d{3})$"),
    re.compile(r"-\d{4}$"),  # OpenAI -0314 / -0613
)
#: Bedrock cross-region inference profiles and vendor prefixes (``us.anthropic.claude-...``).
_DOTTED_PREFIX = re.compile(
    r"^(?:(?:us|eu|apac|au|jp|ca|us-gov|global)\.)?"
    r"(?:anthropic|amazon|meta|mistral|cohere|ai21|openai|deepseek|qwen|writer)\."
)
_REGION_PREFIX = re.compile(r"^(?:us|eu|apac|au|jp|ca|us-gov|global)\.")

#: Usage fields -> genai-prices usage keys (Usage fields not listed here are not billed).
_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
    "cache_write_1h_tokens": "cache_write_1h_tokens",
    "input_audio_tokens": "input_audio_tokens",
    "input_image_tokens": "input_image_tokens",
    "input_video_tokens": "input_video_tokens",
    "cache_read_audio_tokens": "cache_audio_read_tokens",
    "output_audio_tokens": "output_audio_tokens",
    "output_image_tokens": "output_image_tokens",
    "web_search_requests": "web_searches",
    "code_executions": "code_executions",
}
#: Usage fields billed per count (not tokens): a model without their price leaves them unpriced.
_COUNT_FIELDS = {"web_search_requests": "web_searches_kcount", "code_executions": "code_executions_kcount"}

_TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_TOKEN_UNITS = {"mtok": 1_000_000, "ktok": 1_000, "token": 1}
_COUNT_UNITS = {"kcount": 1_000, "count": 1}
_ALLOW_KEY = "allow_implausible_prices"


@dataclass(frozen=True, slots=True)
class CallPrice:
    """The price of one call.

    ``cost_usd``: USD (float >= 0) of the priced part, None when the model is unpriced or the
    usage unknown. ``unpriced``: Usage fields the call reported that the model has no price for
    (e.g. ``("web_search_requests",)``); non-empty = the call is partly unpriced. ``source``:
    ``"genai-prices:<provider>/<model id>"`` or ``"user:<file>"``. ``price_version``: which
    prices priced it (``"genai-prices <version>"`` or ``"user:<file>#<sha256 prefix>"``), stored
    with the row so that only a deliberate ``budgetlens reprice`` changes old costs.
    """

    cost_usd: float | None
    unpriced: tuple[str, ...] = ()
    source: str | None = None
    price_version: str | None = None


_UNPRICED = CallPrice(None)


@dataclass(frozen=True, slots=True)
class _UserModel:
    """One model of a user price file: genai-prices ModelPrice keyword arguments."""

    prices: tuple[tuple[str, Any], ...]
    source: str
    version: str

    def model_price(self) -> Any:
        from genai_prices.types import ModelPrice

        return ModelPrice(**dict(self.prices))


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


def price_version() -> str:
    """The version of the bundled genai-prices data that prices calls (``"genai-prices 0.2.3"``)."""
    import genai_prices

    return f"genai-prices {genai_prices.__version__}"


# --- model names --------------------------------------------------------------------------------


def _name_variants(model: str) -> list[str]:
    """``model`` lower-cased, then without provider/region prefixes, then without suffixes."""
    name = model.strip().lower()
    names = [name]
    while "/" in name:
        name = name.split("/", 1)[1]
        names.append(name)
    for n in list(names):
        for pattern in (_DOTTED_PREFIX, _REGION_PREFIX):
            stripped = pattern.sub("", n)
            if stripped != n and stripped not in names:
                names.append(stripped)
    for n in list(names):
        for pattern in _SUFFIXES:
            stripped = pattern.sub("", n)
            if stripped != n and stripped not in names:
                names.append(stripped)
                n = stripped
    return names


def _provider_candidates(model: str, provider: str | None) -> list[str | None]:
    provider_id = _PROVIDER_IDS.get((provider or "").lower(), (provider or "").lower() or None)
    prefix = model.split("/", 1)[0].lower() if "/" in model else None
    prefix_id = _PROVIDER_IDS.get(prefix, prefix) if prefix else None
    return list(dict.fromkeys([provider_id, prefix_id, None]))


@lru_cache(maxsize=4096)
def _genai_model(model: str, provider: str | None) -> tuple[Any, Any] | None:
    """(genai-prices Provider, ModelInfo) for ``model``, or None when it has no entry."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    for name in _name_variants(model):
        for pid in _provider_candidates(model, provider):
            try:
                return snapshot.find_provider_model(name, None, pid, None)
            except LookupError:
                continue
    return None


_warned_unpriced: set[str] = set()


def _warn_unpriced(model: str, provider: str | None) -> None:
    key = f"{provider or ''}/{model}"
    if key not in _warned_unpriced:
        _warned_unpriced.add(key)
        log.warning(
            "no price for model %r (provider %r): its calls are unpriced; add it to a price file (%s)",
            model,
            provider,
            ENV_PRICES_FILE,
        )


# --- usage -> genai-prices ----------------------------------------------------------------------


def _genai_usage(usage: Usage) -> Any:
    from genai_prices import Usage as GenaiUsage

    values = {key: getattr(usage, name, 0) for name, key in _USAGE_KEYS.items()}
    # cache_write_tokens holds all writes; genai-prices reads the 1h part as a child of it.
    return GenaiUsage(**{key: value for key, value in values.items() if value})


def _price_context(usage: Usage) -> dict[str, str] | None:
    tier = getattr(usage, "service_tier", None)
    if not tier:
        return None
    # Anthropic states batch processing as its service tier; genai-prices keys it "processing".
    return {"service_tier": tier, "processing": "batch"} if tier == "batch" else {"service_tier": tier}


def _unpriced_fields(usage: Usage, model_price: Any) -> tuple[str, ...]:
    return tuple(
        name
        for name, price_key in _COUNT_FIELDS.items()
        if getattr(usage, name, 0) and getattr(model_price, price_key, None) is None
    )


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
    ``BUDGETLENS_PRICES_FILE``) first, else genai-prices. Returns a :class:`CallPrice`; raises
    only ``ValueError`` for an invalid price file.
    """
    if not model or usage is None:
        return _UNPRICED
    path = _configured(prices_file)
    if path:
        user = _user_model(model, path)
        if user is not None:
            return _price_user(model, usage, user)
    found = _genai_model(model, provider)
    if found is None:
        _warn_unpriced(model, provider)
        return _UNPRICED
    genai_provider, info = found
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unknown usage key is reported as unpriced below
            calc = info.calc_price(
                _genai_usage(usage),
                genai_provider,
                genai_request_timestamp=_as_utc(at),
                price_context=_price_context(usage),
            )
    except (ValueError, ArithmeticError) as error:
        log.warning("could not price a call of %r: %s; the call counts as unpriced", model, error)
        return _UNPRICED
    return _priced(
        model,
        float(calc.total_price),
        _unpriced_fields(usage, calc.model_price),
        f"genai-prices:{genai_provider.id}/{info.id}",
        price_version(),
    )


_warned_partly: set[tuple[str, tuple[str, ...]]] = set()


def _priced(model: str, cost: float, unpriced: tuple[str, ...], source: str, version: str) -> CallPrice:
    if unpriced and (model, unpriced) not in _warned_partly:
        _warned_partly.add((model, unpriced))
        log.warning(
            "model %r has no price for %s (%s): those parts of its calls are unpriced",
            model,
            ", ".join(unpriced),
            source,
        )
    return CallPrice(cost, unpriced, source, version)


def _price_user(model: str, usage: Usage, user: _UserModel) -> CallPrice:
    model_price = user.model_price()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = model_price.calc_price(_genai_usage(usage))
    except (ValueError, ArithmeticError) as error:
        log.warning("could not price a call of %r: %s; the call counts as unpriced", model, error)
        return _UNPRICED
    return _priced(
        model, float(result["total_price"]), _unpriced_fields(usage, model_price), user.source, user.version
    )


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


# --- store columns ------------------------------------------------------------------------------

#: Usage fields stored in ``model_calls.usage_details`` (the token columns hold the rest).
_DETAIL_FIELDS = (*(name for name in _USAGE_KEYS if name not in _TOKEN_COLUMNS), "service_tier")


def usage_details(usage: Usage | None) -> str | None:
    """``model_calls.usage_details``: a JSON object of the billing parts of ``usage`` beyond the
    token columns (audio/image/video tokens, 1h cache writes, web searches, service tier), only
    those reported; None when there are none."""
    if usage is None:
        return None
    parts = {name: getattr(usage, name) for name in _DETAIL_FIELDS if getattr(usage, name)}
    return json.dumps(parts, sort_keys=True) if parts else None


def usage_from_details(columns: Mapping[str, Any]) -> Usage | None:
    """The :class:`Usage` of a stored ``model_calls`` row (token columns + ``usage_details``), or
    None when its input or output tokens are unknown (NULL). Raises ValueError for a malformed
    ``usage_details``."""
    if columns.get("input_tokens") is None or columns.get("output_tokens") is None:
        return None
    values: dict[str, Any] = {name: int(columns.get(name) or 0) for name in _TOKEN_COLUMNS}
    raw = columns.get("usage_details")
    extra = json.loads(raw) if raw else {}
    if not isinstance(extra, dict) or set(extra) - set(_DETAIL_FIELDS):
        raise ValueError(f"usage_details must be an object with keys among {_DETAIL_FIELDS}, got {raw!r}")
    return Usage(**{**values, **extra})


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


# --- user price file ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _dimensions() -> dict[str, tuple[str, dict[str, int], int]]:
    """User-file dimension -> (genai-prices price key, units -> count per unit, genai per)."""
    from genai_prices.units import _get_registry

    out: dict[str, tuple[str, dict[str, int], int]] = {}
    for usage_key, unit in _get_registry().units.items():
        if unit.dimensions.get("family") == "tokens":
            out[usage_key.removesuffix("_tokens")] = (unit.price_key, _TOKEN_UNITS, unit.per)
        elif unit.dimensions.get("family") in ("tool_calls", "requests", "rerank"):
            out[usage_key] = (unit.price_key, _COUNT_UNITS, unit.per)
    return out


@lru_cache(maxsize=1)
def _max_public_token_usd() -> float:
    """The highest per-token price (USD) of any token kind of any model in genai-prices."""
    from genai_prices import data_snapshot
    from genai_prices.types import TieredPrices

    highest = Decimal(0)
    for provider in data_snapshot.get_snapshot().providers:
        for info in provider.models:
            prices = [info.prices] if not isinstance(info.prices, list) else [c.prices for c in info.prices]
            for model_price in prices:
                for key, value in vars(model_price).items():
                    if value is None or not key.endswith("_mtok"):
                        continue
                    values = (
                        [value.base, *(t.price for t in value.tiers)]
                        if isinstance(value, TieredPrices)
                        else [value]
                    )
                    highest = max(highest, *values)
    return float(highest) / 1e6


def _number(value: Any, where: str) -> Decimal:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{where} must be a finite number >= 0, got {value!r}")
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def _parse_key(model: str, key: str, path: str) -> tuple[str, str, int, int]:
    """(dimension, unit, count per unit, genai per) of a ``<dimension>_usd_per_<unit>`` key."""
    dims = _dimensions()
    dimension, sep, unit = key.partition("_usd_per_")
    if sep and dimension in dims and unit in dims[dimension][1]:
        return dimension, unit, dims[dimension][1][unit], dims[dimension][2]
    token_dims = sorted(d for d, (_, units, _) in dims.items() if units is _TOKEN_UNITS)
    count_dims = sorted(d for d, (_, units, _) in dims.items() if units is _COUNT_UNITS)
    raise ValueError(
        f"{path}: models.{model}: unknown key {key!r}; expected <dimension>_usd_per_<unit>: token "
        f"dimensions {', '.join(token_dims[:12])}, ... with unit in {tuple(_TOKEN_UNITS)}; counts "
        f"{', '.join(count_dims)} with unit in {tuple(_COUNT_UNITS)}"
    )


def _check_plausible(
    model: str, key: str, dimension: str, unit: str, usd_per_token: float, path: str
) -> None:
    highest = _max_public_token_usd()
    if _dimensions()[dimension][1] is not _TOKEN_UNITS or usd_per_token <= highest:
        return
    figure = usd_per_token * {"mtok": 1e6, "ktok": 1e3, "token": 1}[unit]
    plausible = [u for u, n in _TOKEN_UNITS.items() if figure / n <= highest and n > _TOKEN_UNITS[unit]]
    hint = f"; did you mean {dimension}_usd_per_{plausible[0]}: {figure:g}?" if plausible else ""
    raise ValueError(
        f"{path}: models.{model}.{key} = {figure:g} is ${usd_per_token * 1e6:,.0f} per million "
        f"tokens, above what any public model charges (${highest * 1e6:,.0f} per million){hint} "
        f"Set {_ALLOW_KEY}: true if it is intentional"
    )


def _parse_price(model: str, key: str, value: Any, path: str, allow: bool) -> tuple[str, Any]:
    from genai_prices.types import Tier, TieredPrices

    dimension, unit, count, genai_per = _parse_key(model, key, path)
    price_key = _dimensions()[dimension][0]
    scale = Decimal(genai_per) / Decimal(count)  # our unit -> genai-prices' unit

    def convert(number: Any, where: str) -> Decimal:
        amount = _number(number, where)
        if not allow:
            _check_plausible(model, key, dimension, unit, float(amount) / count, path)
        return amount * scale

    where = f"{path}: models.{model}.{key}"
    if not isinstance(value, dict):
        return price_key, convert(value, where)
    if set(value) - {"base", "tiers"} or "base" not in value or not isinstance(value.get("tiers"), list):
        raise ValueError(
            f"{where}: a tiered price is {{base: N, tiers: [{{above_input_tokens: N, price: N}}]}}"
        )
    tiers = []
    for index, tier in enumerate(value["tiers"]):
        if not isinstance(tier, dict) or set(tier) != {"above_input_tokens", "price"}:
            raise ValueError(f"{where}.tiers[{index}] must have keys above_input_tokens and price")
        start = tier["above_input_tokens"]
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"{where}.tiers[{index}].above_input_tokens must be an int >= 0")
        tiers.append(Tier(start=start, price=convert(tier["price"], f"{where}.tiers[{index}].price")))
    if [t.start for t in tiers] != sorted(t.start for t in tiers):
        raise ValueError(f"{where}.tiers must be in ascending above_input_tokens order")
    return price_key, TieredPrices(base=convert(value["base"], f"{where}.base"), tiers=tiers)


def _parse_entry(model: str, entry: Any, path: str, version: str, allow_all: bool) -> _UserModel:
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: models.{model} must be a mapping of <dimension>_usd_per_<unit> keys")
    allow = entry.get(_ALLOW_KEY, allow_all)
    if not isinstance(allow, bool):
        raise ValueError(f"{path}: models.{model}.{_ALLOW_KEY} must be true or false")
    prices: dict[str, Any] = {}
    for key, value in entry.items():
        if key == _ALLOW_KEY:
            continue
        price_key, price = _parse_price(model, str(key), value, path, allow)
        if price_key in prices:
            raise ValueError(f"{path}: models.{model}: {price_key} price given twice (key {key!r})")
        prices[price_key] = price
    missing = [k for k in ("input", "output") if f"{k}_mtok" not in prices]
    if missing:
        raise ValueError(f"{path}: models.{model}: missing {', '.join(m + '_usd_per_mtok' for m in missing)}")
    user = _UserModel(tuple(prices.items()), f"user:{path}", version)
    try:  # genai-prices' own rules: e.g. a 1h cache-write price needs the cache-write price
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            user.model_price().calc_price(_genai_usage(Usage()))
    except ValueError as error:
        raise ValueError(
            f"{path}: models.{model}: {error} (price keys are <dimension>_usd_per_<unit>, e.g. "
            "cache_write_usd_per_mtok for cache_write_tokens)"
        ) from error
    return user


def load_price_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a user price file (YAML/JSON/TOML by extension) -> {lower-case model name: prices}.

    Raises ``ValueError`` naming the file and key for an unknown key or unit, a bad value, an
    implausible token price (see the module docstring) or an unsupported extension;
    ``FileNotFoundError`` when the file is missing.
    """
    p = Path(path)
    doc = load_document(p, "price file")
    if not isinstance(doc, dict) or set(doc) - {"models", _ALLOW_KEY}:
        extra = sorted(set(doc) - {"models", _ALLOW_KEY}) if isinstance(doc, dict) else doc
        raise ValueError(
            f"{p}: a price file has the top-level keys 'models' and '{_ALLOW_KEY}'; unknown: {extra}"
        )
    models = doc.get("models") or {}
    if not isinstance(models, dict):
        raise ValueError(f"{p}: 'models' must be a mapping of model name -> prices")
    allow_all = doc.get(_ALLOW_KEY, False)
    if not isinstance(allow_all, bool):
        raise ValueError(f"{p}: {_ALLOW_KEY} must be true or false")
    version = f"user:{p}#{hashlib.sha256(p.read_bytes()).hexdigest()[:12]}"
    return {
        str(name).lower(): _parse_entry(str(name), entry, str(p), version, allow_all)
        for name, entry in models.items()
    }


@lru_cache(maxsize=16)
def _user_table(path: str) -> dict[str, Any]:
    table = load_price_file(path)
    log.info("loaded %d model prices from %s", len(table), path)
    return table


def _user_model(model: str, path: str) -> _UserModel | None:
    table = _user_table(path)
    for name in _name_variants(model):
        if name in table:
            return table[name]
    return None


def _configured(prices_file: str | os.PathLike | None) -> str | None:
    path = resolve(prices_file, ENV_PRICES_FILE, None)
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


def clear_price_cache() -> None:
    """Forget resolved models, loaded price files and the models already warned about."""
    _genai_model.cache_clear()
    _user_table.cache_clear()
    _warned_unpriced.clear()
    _warned_partly.clear()
