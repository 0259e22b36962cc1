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

Model names resolve as genai-prices matches them, then without provider and region prefixes
(``openai/``, ``bedrock/``, ``us.``, ``global.``, ``anthropic.``) and version or date suffixes
(``-2025-08-07``, ``-20250929``, ``-0315``, ``@20250514``, ``:0``, ``-v1:0``, ``-latest``): the
full (dated) name first, so a dated entry wins over its base model.

User price file (YAML, JSON or TOML; path from the argument, else the environment variable
``BUDGETLENS_PRICES_FILE``): its format and checks are in ``budgetlens.price_file``; its prices
win over genai-prices for the models it names.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from budgetlens.billing_parts import unpriced_audio, unpriced_fields, without_parts
from budgetlens.config import ENV_PRICES_FILE, resolve
from budgetlens.price_file import USAGE_KEYS, UserModel, genai_usage, load_price_file, user_table
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

#: Usage fields billed per count (not tokens): a model without their price leaves them unpriced.

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
    ``unpriced_reason``: why the call is unpriced or partly unpriced (``"no model"``,
    ``"usage unknown"``, ``"no price for model 'x'"``, ``"could not price: <error>"``,
    ``"no price for web_search_requests"``); None for a fully priced call.
    """

    cost_usd: float | None
    unpriced: tuple[str, ...] = ()
    source: str | None = None
    price_version: str | None = None
    unpriced_reason: str | None = None


#: What genai-prices or a user price file can raise while a call is priced (all mean: unpriced).
_PRICE_ERRORS = (OSError, ValueError, ArithmeticError, LookupError, TypeError)


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
    if not model:
        return CallPrice(None, unpriced_reason="no model")
    if usage is None:
        return CallPrice(None, unpriced_reason="usage unknown")
    try:
        return _price(model, usage, provider, at, prices_file)
    except _PRICE_ERRORS as error:
        log.warning("could not price a call of %r: %s; the call counts as unpriced", model, error)
        return CallPrice(None, unpriced_reason=f"could not price: {error}")


def _price(
    model: str,
    usage: Usage,
    provider: str | None,
    at: dt.datetime | None,
    prices_file: str | os.PathLike | None,
) -> CallPrice:
    """:func:`price_call` for a model and a usage; raises ``_PRICE_ERRORS``."""
    path = _configured(prices_file)
    if path:
        user = _user_model(model, path)
        if user is not None:
            return _price_user(model, usage, user)
    found = _genai_model(model, provider)
    if found is None:
        _warn_unpriced(model, provider)
        return CallPrice(None, unpriced_reason=f"no price for model {model!r}")
    genai_provider, info = found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown usage key is reported as unpriced below
        calc = info.calc_price(
            genai_usage(usage),
            genai_provider,
            genai_request_timestamp=_as_utc(at),
            price_context=_price_context(usage),
        )
        audio = unpriced_audio(usage, calc.model_price)
        if audio:  # the text part is priced; the audio part is named unpriced, never text-rated
            calc = info.calc_price(
                genai_usage(without_parts(usage, audio)),
                genai_provider,
                genai_request_timestamp=_as_utc(at),
                price_context=_price_context(usage),
            )
    return _priced(
        model,
        float(calc.total_price),
        unpriced_fields(usage, calc.model_price),
        f"genai-prices:{genai_provider.id}/{info.id}",
        price_version(),
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
    model_price = user.model_price()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = model_price.calc_price(genai_usage(usage))
    return _priced(
        model, float(result["total_price"]), unpriced_fields(usage, model_price), user.source, user.version
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
_DETAIL_FIELDS = (
    *(name for name in USAGE_KEYS if name not in _TOKEN_COLUMNS),
    "service_tier",
    "provider_total_tokens",
)


def usage_details(usage: Usage | None) -> str | None:
    """``model_calls.usage_details``: a JSON object of the billing parts of ``usage`` beyond the
    token columns (audio/image/video tokens, 1h cache writes, web searches, service tier, the
    provider's own total when it disagrees with the parts), only
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


def _user_model(model: str, path: str) -> UserModel | None:
    table = user_table(path)
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
        user_table(path)
    except OSError as error:
        raise ValueError(f"price file {path}{origin} cannot be read: {error}") from error
    except ValueError as error:
        raise ValueError(f"{error}{origin}") from error


def clear_price_cache() -> None:
    """Forget resolved models, loaded price files and the models already warned about."""
    _genai_model.cache_clear()
    user_table.cache_clear()
    _warned_unpriced.clear()
    _warned_partly.clear()
