"""Batch pricing by rates x counts equals genai-prices' calc_price (issue 25)."""

from __future__ import annotations

import datetime as dt
import random
import warnings
from decimal import Decimal

import pytest
from genai_prices import data_snapshot
from genai_prices.types import ModelPrice

from budgetlens import pricing
from budgetlens.price_file import genai_usage
from budgetlens.price_names import genai_model
from budgetlens.price_rates import is_tiered
from budgetlens.pricing import PriceRequest, clear_price_cache, price_call, price_calls
from budgetlens.usage import Usage

AT = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def _sampled_rates(rng: random.Random, count: int):
    """The Rates of ``count`` linear (untiered) genai-prices models picked by ``rng``, each price
    the cache resolved for it (a model may have several: one per price version)."""
    for provider, info in rng.sample(_models(tiered=False), count):
        price_call(info.id, Usage(1, 1), provider.id, at=AT)
        for key, rates in list(pricing._rates.items()):
            if rates is not None and key[1:3] == (provider.id, info.id):
                yield rates


def _models(tiered: bool) -> list[tuple[object, object]]:
    """(provider, model info) pairs of genai-prices with one price (tiered or not)."""
    out = []
    for provider in data_snapshot.get_snapshot().providers:
        for info in provider.models:
            prices = info.prices
            if isinstance(prices, ModelPrice) and is_tiered(prices) == tiered:
                out.append((provider, info))
    return out


def _usage(rng: random.Random, tier: str | None = None) -> Usage:
    inp = rng.randrange(0, 2_000_000)
    cache_read = rng.randrange(0, inp // 2 + 1)
    cache_write = rng.randrange(0, (inp - cache_read) // 2 + 1)
    out = rng.randrange(0, 200_000)
    return Usage(
        inp,
        out,
        cache_read,
        cache_write,
        rng.randrange(0, out + 1),
        cache_write_1h_tokens=rng.randrange(0, cache_write + 1) if rng.random() < 0.3 else 0,
        input_image_tokens=rng.randrange(0, (inp - cache_read - cache_write) // 4 + 1)
        if rng.random() < 0.2
        else 0,
        web_search_requests=rng.randrange(0, 5) if rng.random() < 0.2 else 0,
        service_tier=tier,
    )


def _reference(provider: object, info: object, usage: Usage) -> Decimal:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return info.calc_price(  # type: ignore[attr-defined]
            genai_usage(usage),
            provider,
            genai_request_timestamp=AT,
            price_context={"service_tier": usage.service_tier} if usage.service_tier else None,
        ).total_price


@pytest.mark.system  # genai-prices on many random usages: seconds
def test_rates_times_counts_equal_calc_price_on_random_usages_for_many_models():
    clear_price_cache()
    rng = random.Random(25)
    linear = _models(tiered=False)
    assert len(linear) > 200
    checked = fast = 0
    for provider, info in rng.sample(linear, 250):
        requests = [PriceRequest(info.id, _usage(rng), provider.id, AT) for _ in range(8)]
        priced = price_calls(requests)
        for request, result in zip(requests, priced, strict=True):
            try:
                expected = _reference(provider, info, request.usage)
            except ValueError:  # genai-prices refuses it: so does the price path
                assert result.cost_usd is None and result.unpriced_reason.startswith("could not price")
                continue
            if result.source != f"genai-prices:{provider.id}/{info.id}":
                continue  # the name resolved to another entry (e.g. a dated alias)
            assert result.cost_usd == pytest.approx(float(expected), rel=1e-12, abs=1e-9)
            checked += 1
        key = next((k for k in pricing._rates if k[1:3] == (provider.id, info.id)), None)
        fast += key is not None and pricing._rates[key] is not None
    assert checked > 1000
    assert fast > 200  # the linear prices were priced by rates, not call by call


def test_a_service_tier_resolves_its_own_rates():
    clear_price_cache()
    rng = random.Random(7)
    usages = [_usage(rng, tier) for tier in (None, "flex", "priority", "batch") for _ in range(5)]
    for usage in usages:
        found = genai_model("gpt-5", "openai")
        assert found is not None
        expected = _reference(*found, usage) if usage.service_tier != "batch" else None
        got = price_call("gpt-5", usage, "openai", at=AT)
        if expected is not None:
            assert got.cost_usd == pytest.approx(float(expected), rel=1e-12, abs=1e-9)
    tiers = {key[3] for key in pricing._rates if key[2] == found[1].id}
    assert tiers == {None, "flex", "priority", "batch"}


def test_tiered_prices_keep_the_per_call_calculation():
    clear_price_cache()
    rng = random.Random(3)
    tiered = _models(tiered=True)
    assert tiered, "genai-prices has tiered prices (by input tokens above a threshold)"
    for provider, info in tiered[:20]:
        for _ in range(5):
            usage = _usage(rng)
            result = price_call(info.id, usage, provider.id, at=AT)
            if result.source != f"genai-prices:{provider.id}/{info.id}":
                continue
            assert result.cost_usd == pytest.approx(float(_reference(provider, info, usage)), rel=1e-12)
        key = next((k for k in pricing._rates if k[1:3] == (provider.id, info.id)), None)
        assert key is None or pricing._rates[key] is None  # no rates: every call priced by calc_price


def test_an_unknown_model_in_a_batch_is_unpriced_with_the_reason_and_the_others_priced():
    priced = price_calls(
        [
            PriceRequest("acme-llm-9", Usage(10, 10)),
            PriceRequest("gpt-4o", Usage(1000, 100), "openai", AT),
            PriceRequest("gpt-4o", None, "openai", AT),
            PriceRequest(None, Usage(1, 1)),
        ]
    )
    assert priced[0].cost_usd is None and priced[0].unpriced_reason == "no price for model 'acme-llm-9'"
    assert priced[1].cost_usd is not None and priced[1].cost_usd > 0
    assert priced[2].unpriced_reason == "usage unknown"
    assert priced[3].unpriced_reason == "no model"


def test_an_audio_part_without_an_audio_rate_falls_back_and_is_named_unpriced():
    usage = Usage(1000, 10, input_audio_tokens=400)
    first, second = price_calls([PriceRequest("gpt-4o-mini", usage, "openai", AT)] * 2)
    text_only = price_call("gpt-4o-mini", Usage(600, 10), "openai", at=AT)
    assert first == second
    if first.unpriced:  # this genai-prices entry has no audio rate
        assert first.unpriced == ("input_audio_tokens",)
        assert first.cost_usd == pytest.approx(text_only.cost_usd, rel=1e-12)


def test_a_user_price_file_model_is_priced_by_rates(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(
        "models:\n  my-finetune:\n    input_usd_per_mtok: 1.5\n    output_usd_per_mtok: 4.0\n"
        "    cache_read_usd_per_mtok: 0.15\n    requests_usd_per_count: 0.001\n"
    )
    clear_price_cache()
    result = price_calls([PriceRequest("my-finetune", Usage(1_000_000, 500_000, 200_000))], prices_file=path)[
        0
    ]
    # 800k uncached input at 1.5, 200k cached at 0.15, 500k output at 4.0, one request fee
    assert result.cost_usd == pytest.approx(1.2 + 0.03 + 2.0 + 0.001, abs=1e-12)
    assert any(key[0] == "user" and rates is not None for key, rates in pricing._rates.items())


@pytest.mark.system  # many random usages: seconds
def test_the_whole_number_sum_is_the_decimal_sum_exactly_on_random_usages():
    """Rates.cost sums in whole 1/scale USD (Python ints) where Decimal would be exact too: the float
    is bit for bit the float of genai-prices' Decimal rates x counts, up to 10^12 tokens a field."""
    from itertools import compress

    from budgetlens.price_rates import _COUNTS, _FIELDS

    clear_price_cache()
    rng = random.Random(2025)
    compared = scaled = 0
    for rates in _sampled_rates(rng, 120):
        for _ in range(10):
            inp = rng.randrange(0, 10 ** rng.randrange(1, 13))
            cache_read = rng.randrange(0, inp + 1)
            out = rng.randrange(0, 10 ** rng.randrange(1, 13))
            usage = Usage(inp, out, cache_read, rng.randrange(0, inp - cache_read + 1))
            got = rates.cost(usage)
            if got is None:
                continue
            values = _COUNTS(usage)
            plan = rates._plan(tuple(compress(_FIELDS, values)))  # the shape's own plan
            total = rates.fee
            for rate, count in zip(plan.rates, compress(values, values), strict=True):
                total += rate * count
            assert got[0] == float(total)  # the same float, not approximately
            compared += 1
            scaled += plan.scaled is not None
    assert compared > 300 and scaled > 300


def test_a_price_that_starts_on_a_date_is_resolved_once_a_day_and_applies_from_that_day():
    clear_price_cache()
    usage = Usage(60_000, 5_000, 10_000)
    before = price_call("gpt-5.6-sol", usage, at=dt.datetime(2026, 8, 20, 23, 59, tzinfo=dt.UTC))
    after = price_call("gpt-5.6-sol", usage, at=dt.datetime(2026, 8, 21, 0, 1, tzinfo=dt.UTC))
    again = price_call("gpt-5.6-sol", usage, at=dt.datetime(2026, 8, 20, 12, 0, tzinfo=dt.UTC))
    assert before.cost_usd != after.cost_usd  # the price changed on 2026-08-21
    assert again == before
    assert len(pricing._by_day) == 2  # one resolution per UTC day, not per call


def _text_usage(rng: random.Random, part: str | None = None) -> Usage:
    """A random usage of text tokens (any shape a Usage can have among them), with ``part`` (a
    billing part or tool count) set too when given."""
    inp = rng.randrange(0, 10 ** rng.randrange(0, 13)) if rng.random() < 0.9 else 0
    cache_read = rng.randrange(0, inp + 1) if rng.random() < 0.6 else 0
    cache_write = rng.randrange(0, inp - cache_read + 1) if rng.random() < 0.4 else 0
    out = rng.randrange(0, 10 ** rng.randrange(0, 13)) if rng.random() < 0.9 else 0
    extra: dict[str, int] = {}
    if part == "cache_write_1h_tokens":
        cache_write = max(cache_write, 1)
        inp = max(inp, cache_read + cache_write)
    if part in ("input_audio_tokens", "input_image_tokens", "input_video_tokens", "cache_read_audio_tokens"):
        inp = max(inp, 1)
        if part == "cache_read_audio_tokens":
            extra["input_audio_tokens"] = 1
            cache_read = max(cache_read, 1)
            inp = max(inp, cache_read + cache_write + 1)
    if part in ("output_audio_tokens", "output_image_tokens"):
        out = max(out, 1)
    if part is not None:
        extra[part] = 1
    reasoning = rng.randrange(0, out + 1) if rng.random() < 0.3 else 0
    return Usage(inp, out, cache_read, cache_write, reasoning, **extra)


def test_the_text_plan_equals_the_plan_of_each_shape_on_random_usages():
    """Rates.cost prices a usage of text tokens only by one sum over the text fields (the text
    plan); the figure is the one the plan of the usage's own shape gives, bit for bit, and a usage
    with any billing part or tool count is priced by its shape's plan."""
    from budgetlens.price_rates import _COUNTS, _PART_FIELDS

    clear_price_cache()
    rng = random.Random(2512)
    compared = by_text = 0
    for rates in _sampled_rates(rng, 40):
        for part in (None, None, None, *_PART_FIELDS):
            usage = _text_usage(rng, part)
            got = rates.cost(usage)
            assert got == rates.plan_cost(usage, _COUNTS(usage))
            compared += 1
        by_text += bool(rates._text)
    assert compared > 400 and by_text > 30
