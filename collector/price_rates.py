"""Per-dimension rates of a linear price, from genai-prices' own calculation (issue 25).

A resolved price (one genai-prices ``ModelPrice`` in force: a (provider, model, conditional
price, variant, service tier) or a user price file's model) whose every rate is a plain number
prices a call linearly in each usage field: ``cost = fee + sum(rate[field] * count[field])``.
:func:`derive_rates` finds the ``fee`` and the rates by calling the same calculation that
prices one call (``calc``: genai-prices' ``calc_price``) on a base usage and on the base plus
1,000,000 of one field, and checks linearity on a second point; a price with tiers
(``TieredPrices``: the rate depends on the call's input tokens) or one that fails the check has
no rates and keeps the per-call calculation.

:meth:`Rates.cost` prices one call by rates x counts (``Decimal``, as genai-prices computes), or
returns None when the call must take the per-call path to match genai-prices exactly: an audio
part the model has no audio rate for, a usage shape genai-prices refuses (a reported part
without the explicit total it needs), or a priced leaf (a count less its priced parts) below 0.
Pure; no I/O.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, getcontext
from itertools import compress
from operator import attrgetter, mul
from typing import Any, NamedTuple

from budgetlens.billing_parts import unpriced_audio, unpriced_fields
from budgetlens.limits import MAX_TOKENS
from budgetlens.price_file import USAGE_KEYS
from budgetlens.usage import Usage

__all__ = ["Rates", "derive_rates", "is_tiered"]

#: Usage fields billed by genai-prices (``price_file.USAGE_KEYS``), in a fixed order.
_FIELDS = tuple(USAGE_KEYS)
_STEP = 1_000_000  # the unit usage added per field ("per million tokens", exact in Decimal)

#: (total USD as Decimal, the genai-prices ModelPrice that priced it) of a genai-prices usage.
Calc = Callable[[Any], tuple[Decimal, Any]]


def is_tiered(model_price: Any) -> bool:
    """True when any rate of a genai-prices ``ModelPrice`` is a ``TieredPrices`` (by input
    tokens above a threshold): such a price is not linear and is priced call by call."""
    from genai_prices.types import TieredPrices

    return any(isinstance(value, TieredPrices) for value in vars(model_price).values())


class _Plan(NamedTuple):
    """How :meth:`Rates.cost` prices a usage of one shape (the fields it reports > 0, in
    ``_FIELDS`` order): ``ok``: genai-prices reads it; ``beyond_text``: it reports a part beyond
    the text token counts (the unpriced parts are looked up); ``rates``: the rate of each field of
    the shape; ``leaves``: the signed leaves as (position in the shape, coefficient) pairs;
    ``scaled``: the fee and the rates as whole numbers of ``1 / scale`` USD, (fee, scale, rates),
    when no sum of any usage can pass the ``Decimal`` precision (None: summed in ``Decimal``);
    ``forms``: the leaves again as (positions, coefficients) pairs (summed by ``map``)."""

    ok: bool
    beyond_text: bool
    rates: tuple[Decimal, ...]
    leaves: tuple[tuple[tuple[int, int], ...], ...]
    scaled: tuple[int, int, tuple[int, ...]] | None
    forms: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(slots=True)
class Rates:
    """A linear price: ``fee`` (USD per call: genai-prices' per-request price) and ``rates``
    (Usage field -> USD per unit); ``leaves``: each priced genai-prices leaf as a linear form
    over Usage fields (a call with one below 0 is refused by genai-prices); ``priced_keys``:
    the genai-prices usage keys the price has a rate for; ``model_price``: the genai-prices
    ``ModelPrice`` (tells which parts are unpriced)."""

    fee: Decimal
    rates: dict[str, Decimal]
    leaves: tuple[tuple[tuple[str, int], ...], ...]
    priced_keys: tuple[str, ...]
    model_price: Any
    _plans: dict[tuple[str, ...], _Plan] = field(default_factory=dict)
    _text: tuple[Any, ...] | None = None  # the text plan (see _text_plan); () when there is none

    def cost(self, usage: Usage) -> tuple[float, tuple[str, ...]] | None:
        """(USD of ``usage`` as float, the parts left unpriced) by rates x counts, or None when the
        call must be priced call by call to match genai-prices (see the module docstring). The sum
        is exact, so the float is the ``Decimal`` sum's: in whole ``1 / scale`` USD (Python ints,
        divided once, correctly rounded) when the plan has them, else in ``Decimal``."""
        text = self._text
        if text is None:
            text = self._text = self._text_plan()
        if text and not (
            usage.cache_write_1h_tokens
            or usage.input_audio_tokens
            or usage.input_image_tokens
            or usage.input_video_tokens
            or usage.cache_read_audio_tokens
            or usage.output_audio_tokens
            or usage.output_image_tokens
            or usage.web_search_requests
            or usage.code_executions
        ):  # text tokens only (every field of _PART_FIELDS is 0): the common call, one sum
            fee, scale, inp, out, cache_read, cache_write = text
            return (
                fee
                + inp * usage.input_tokens
                + out * usage.output_tokens
                + cache_read * usage.cache_read_tokens
                + cache_write * usage.cache_write_tokens
            ) / scale, ()
        return self.plan_cost(usage, _COUNTS(usage))

    def plan_cost(self, usage: Usage, values: tuple[int, ...]) -> tuple[float, tuple[str, ...]] | None:
        """:meth:`cost` by the plan of the usage's shape (``values``: its :data:`_COUNTS`): the
        reference of the text plan's figure (the tests compare the two), and every other usage's."""
        shape = tuple(compress(_FIELDS, values))
        plan = self._plans.get(shape)
        if plan is None:
            plan = self._plans[shape] = self._plan(shape)
        unpriced = unpriced_fields(usage, self.model_price) if plan.beyond_text else ()
        if unpriced and unpriced_audio(usage, self.model_price):
            return None
        if not plan.ok:
            return None
        counts = tuple(compress(values, values))
        for positions, coefficients in plan.forms:
            if sum(map(mul, coefficients, map(counts.__getitem__, positions))) < 0:
                return None
        scaled = plan.scaled
        if scaled is not None:  # whole numbers (Python ints): exact, divided once
            return (scaled[0] + sum(map(mul, scaled[2], counts))) / scaled[1], unpriced
        total = self.fee
        for decimal_rate, value in zip(plan.rates, counts):  # in _FIELDS order, as genai-prices adds
            total += decimal_rate * value
        return float(total), unpriced

    def _text_plan(self) -> tuple[Any, ...]:
        """How :meth:`cost` prices a usage that reports text tokens only (every field of
        :data:`_PART_FIELDS` 0), whatever its shape among them: (fee, scale, the rates of the
        :data:`_TEXT_FIELDS`), as whole numbers of ``1 / scale`` USD; () when a text shape a Usage
        can have is one genai-prices refuses, a signed leaf could go below 0 for one, or the whole
        numbers of the text fields could pass the ``Decimal`` precision (then each shape takes its
        own plan). Otherwise any text shape's own plan is accepted, has no leaf below 0 and has
        whole numbers at a scale that divides this one (a subset of these rates), so both give
        the same exact sum and the same float."""
        shapes = [
            tuple(name for i, name in enumerate(_TEXT_FIELDS) if mask >> i & 1)
            for mask in range(1 << len(_TEXT_FIELDS))
        ]
        # A Usage reports a cache read or write only with its input (they are parts of it).
        possible = [s for s in shapes if "input_tokens" in s or not _INPUT_PARTS.intersection(s)]
        if not all(_shape_accepted(shape, self.priced_keys) for shape in possible):
            return ()
        if not all(
            _never_negative(tuple(dict(leaf).get(name, 0) for name in _TEXT_FIELDS)) for leaf in self.leaves
        ):
            return ()
        scaled = _scaled(self.fee, tuple(self.rates[name] for name in _TEXT_FIELDS))
        if scaled is None:
            return ()
        return (scaled[0], scaled[1], *scaled[2])

    def _plan(self, shape: tuple[str, ...]) -> _Plan:
        position = {name: i for i, name in enumerate(shape)}
        leaves = tuple(
            pairs
            for leaf in self.leaves
            if (pairs := tuple((position[n], c) for n, c in leaf if n in position))
        )
        rates = tuple(self.rates[name] for name in shape)
        return _Plan(
            _shape_accepted(shape, self.priced_keys),
            bool(set(shape) - _TEXT_TOKENS),
            rates,
            leaves,
            _scaled(self.fee, rates),
            tuple((tuple(i for i, _ in leaf), tuple(c for _, c in leaf)) for leaf in leaves),
        )


def _scaled(fee: Decimal, rates: tuple[Decimal, ...]) -> tuple[int, int, tuple[int, ...]] | None:
    """(fee, scale, rates) as whole numbers of ``1 / scale`` USD, when ``Decimal`` would sum any
    usage (each count at most ``MAX_TOKENS``) exactly too: every product and partial sum within its
    precision, so both sums are the same number. None otherwise (or for a rate that is not finite)."""
    numbers = (fee, *rates)
    if not all(number.is_finite() for number in numbers):
        return None
    places = max(0, *(-int(number.as_tuple().exponent) for number in numbers))
    whole = [int(number.scaleb(places)) for number in numbers]
    if any(Decimal(w).scaleb(-places) != number for w, number in zip(whole, numbers)):
        return None
    if abs(whole[0]) + sum(abs(w) for w in whole[1:]) * MAX_TOKENS >= 10 ** getcontext().prec:
        return None
    return whole[0], 10**places, tuple(whole[1:])


#: The counts of a Usage in ``_FIELDS`` order (one C call).
_COUNTS = attrgetter(*_FIELDS)
#: The text token fields (they lead ``_FIELDS``) and the billing parts and tool counts after them
#: (:meth:`Rates.cost` reads each of these by name: a usage with all of them 0 is priced by the
#: text plan).
_TEXT_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_TEXT_TOKENS = frozenset(_TEXT_FIELDS)
_PART_FIELDS = _FIELDS[len(_TEXT_FIELDS) :]
if _FIELDS[: len(_TEXT_FIELDS)] != _TEXT_FIELDS:
    raise ImportError("budgetlens.price_rates: _FIELDS must lead with the text token fields")
_INPUT_PARTS = frozenset(("cache_read_tokens", "cache_write_tokens"))


def _never_negative(form: tuple[int, ...]) -> bool:
    """Whether a linear form over the text fields (input, output, cache read, cache write) is
    >= 0 for every Usage reporting text tokens only: those usages are the sums, with counts >= 0,
    of an uncached input token, an output token, and a cache read or a cache write with its
    input token (cache reads and writes are parts of the input), so the form is >= 0 on all of
    them iff it is >= 0 on each of these four."""
    inp, out, cache_read, cache_write = form
    return inp >= 0 and out >= 0 and inp + cache_read >= 0 and inp + cache_write >= 0


def _shape_accepted(shape: tuple[str, ...], priced_keys: tuple[str, ...]) -> bool:
    """Whether genai-prices reads every priced key of a usage that reports (> 0) exactly the
    fields ``shape``: its own inference refuses a part reported without the total it needs."""
    from genai_prices import Usage as GenaiUsage

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = GenaiUsage(**{USAGE_KEYS[name]: 1 for name in shape})
        try:
            for key in priced_keys:
                getattr(probe, key)
        except ValueError:
            return False
    return True


def _base() -> dict[str, int]:
    """A usage (genai-prices keys) where every part is well inside its totals: a key with more
    ancestors (a finer part) gets a smaller count, so adding ``_STEP`` to one keeps it valid."""
    from genai_prices.units import _get_registry

    registry = _get_registry()
    return {key: 10 ** (15 - 3 * len(registry.ancestor_usage_keys(key))) for key in USAGE_KEYS.values()}


def _leaves(model_price: Any, usage: Any) -> dict[str, Any]:
    """genai-prices' own leaf counts of a usage under ``model_price`` (each priced key's count
    less its priced parts; the per-request key counts 1); raises ValueError below 0."""
    from genai_prices.types import (
        Usage as GenaiUsage,
    )
    from genai_prices.types import (
        _collect_resolved_model_prices,
        _compute_registry_priced_counts,
    )
    from genai_prices.units import _get_registry

    resolved = _collect_resolved_model_prices(model_price, _get_registry())
    return _compute_registry_priced_counts(resolved, GenaiUsage.from_raw(usage))


def derive_rates(calc: Calc) -> Rates | None:
    """The :class:`Rates` of a price, from ``calc`` (genai-prices' calculation of a genai-prices
    usage) on an empty usage (the per-call fee), a base usage, the base + 1,000,000 of each
    field, and twice the base (the linearity check). None when the price has tiers or is not
    linear (the per-call calculation prices it). Raises what ``calc`` raises."""
    from genai_prices import Usage as GenaiUsage

    base = _base()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fee, model_price = calc(GenaiUsage())
        if is_tiered(model_price):
            return None
        at_base, _ = calc(GenaiUsage(**base))
        base_leaves = _leaves(model_price, GenaiUsage(**base))
        rates: dict[str, Decimal] = {}
        forms: dict[str, dict[str, int]] = {key: {} for key in base_leaves}
        for name in _FIELDS:
            key = USAGE_KEYS[name]
            stepped = GenaiUsage(**{**base, key: base[key] + _STEP})
            total, _ = calc(stepped)
            rates[name] = (total - at_base) / _STEP
            for leaf_key, value in _leaves(model_price, stepped).items():
                change = (value - base_leaves[leaf_key]) // _STEP
                if change:
                    forms[leaf_key][name] = change
        doubled, _ = calc(GenaiUsage(**{key: 2 * value for key, value in base.items()}))
    predicted = fee + sum(rates[name] * 2 * base[USAGE_KEYS[name]] for name in _FIELDS)
    if doubled != predicted or at_base != fee + sum(rates[n] * base[USAGE_KEYS[n]] for n in _FIELDS):
        return None
    signed = tuple(tuple(form.items()) for form in forms.values() if any(c < 0 for c in form.values()))
    priced = tuple(key for key in base_leaves if key != "requests")
    return Rates(fee, rates, signed, priced, model_price)
