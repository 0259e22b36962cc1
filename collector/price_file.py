"""User price files (design §3): parsing, validation and the plausibility check.

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

:func:`load_price_file` reads one; ``budgetlens.pricing`` resolves the configured file and prices
calls with it (:func:`budgetlens.pricing.price_call`).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import warnings
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from budgetlens.config import ENV_PRICES_FILE, environ_get, load_document, resolve
from budgetlens.price_names import name_variants
from budgetlens.usage import Usage

log = logging.getLogger(__name__)

#: Usage fields -> genai-prices usage keys (Usage fields not listed here are not billed).
USAGE_KEYS = {
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
_TOKEN_UNITS = {"mtok": 1_000_000, "ktok": 1_000, "token": 1}
_COUNT_UNITS = {"kcount": 1_000, "count": 1}
_ALLOW_KEY = "allow_implausible_prices"


@dataclass(frozen=True, slots=True)
class UserModel:
    """One model of a user price file: genai-prices ModelPrice keyword arguments, its source
    (``"user:<file>"``) and price version (``"user:<file>#<sha256 prefix>"``)."""

    prices: tuple[tuple[str, Any], ...]
    source: str
    version: str

    def model_price(self) -> Any:
        from genai_prices.types import ModelPrice

        return ModelPrice(**dict(self.prices))


def genai_usage(usage: Usage) -> Any:
    """A genai-prices ``Usage`` of a normalized :class:`~budgetlens.usage.Usage` (only the
    billed fields that are non-zero)."""
    from genai_prices import Usage as GenaiUsage

    values = {key: getattr(usage, name, 0) for name, key in USAGE_KEYS.items()}
    # cache_write_tokens holds all writes; genai-prices reads the 1h part as a child of it.
    return GenaiUsage(**{key: value for key, value in values.items() if value})


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


def _parse_entry(model: str, entry: Any, path: str, version: str, allow_all: bool) -> UserModel:
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
    user = UserModel(tuple(prices.items()), f"user:{path}", version)
    try:  # genai-prices' own rules: e.g. a 1h cache-write price needs the cache-write price
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            user.model_price().calc_price(genai_usage(Usage()))
    except ValueError as error:
        raise ValueError(
            f"{path}: models.{model}: {error} (price keys are <dimension>_usd_per_<unit>, e.g. "
            "cache_write_usd_per_mtok for cache_write_tokens)"
        ) from error
    return user


def load_price_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a user price file (YAML/JSON/TOML by extension) -> {lower-case model name: prices}.

    Raises ``ValueError`` naming the file and key for an unknown key or unit, a bad value, an
    implausible token price (see the module docstring), two model names that differ only by
    case, a path that is not a regular file (a FIFO is refused) or an unsupported extension;
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
    seen: dict[str, str] = {}
    for name in models:
        first = seen.setdefault(str(name).lower(), str(name))
        if first != str(name):
            raise ValueError(
                f"{p}: models {first!r} and {str(name)!r} differ only by case (model names are "
                "matched case-insensitively); keep one"
            )
    version = f"user:{p}#{hashlib.sha256(p.read_bytes()).hexdigest()[:12]}"
    return {
        str(name).lower(): _parse_entry(str(name), entry, str(p), version, allow_all)
        for name, entry in models.items()
    }


@lru_cache(maxsize=16)
def user_table(path: str) -> dict[str, Any]:
    """:func:`load_price_file` of ``path``, cached (cleared by ``pricing.clear_price_cache``)."""
    table = load_price_file(path)
    log.info("loaded %d model prices from %s", len(table), path)
    return table


__all__ = ["USAGE_KEYS", "UserModel", "genai_usage", "load_price_file", "user_table"]


# --- the configured file ------------------------------------------------------------------------


def configured_file(prices_file: str | os.PathLike | None) -> str | None:
    """The user price file in effect: ``prices_file``, else ``BUDGETLENS_PRICES_FILE``; None
    when neither is set (genai-prices alone prices)."""
    if prices_file is None:  # the common case (the guard asks at each priced call)
        return environ_get(ENV_PRICES_FILE) or None
    path = resolve(prices_file, ENV_PRICES_FILE, None)
    return str(path) if path else None


def user_model(model: str, path: str) -> UserModel | None:
    """The entry of the price file ``path`` for ``model`` (name variants tried in order, see
    ``budgetlens.price_names``); None when the file does not name it."""
    table = user_table(path)
    for name in name_variants(model):
        if name in table:
            return table[name]
    return None


def check_prices_file(prices_file: str | os.PathLike | None = None) -> None:
    """Read (and cache) the user price file now, so a bad one fails before any call is paid for.

    ``prices_file`` defaults to ``BUDGETLENS_PRICES_FILE``; nothing to do when neither is set.
    Raises ValueError naming the file (and the variable when it came from there) when it is
    missing, unreadable or invalid.
    """
    path = configured_file(prices_file)
    if not path:
        return
    origin = f" (from {ENV_PRICES_FILE})" if prices_file is None else ""
    try:
        user_table(path)
    except OSError as error:
        raise ValueError(f"price file {path}{origin} cannot be read: {error}") from error
    except ValueError as error:
        raise ValueError(f"{error}{origin}") from error
