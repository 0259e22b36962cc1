"""Pricing (design §3): genai-prices, user price file, name resolution, unpriced is None."""

from __future__ import annotations

import json

import pytest
from genai_prices import Usage as GenaiUsage
from genai_prices import calc_price

from budgetlens.config import ENV_PRICES_FILE
from budgetlens.pricing import (
    check_prices_file,
    cost_usd,
    estimate_cost_usd,
    load_price_file,
    price_call,
)
from budgetlens.usage import Usage

CACHED = Usage(
    input_tokens=250_000,
    output_tokens=5_000,
    cache_read_tokens=100_000,
    cache_write_tokens=20_000,
    reasoning_tokens=1_000,
)
SMALL = Usage(input_tokens=1_200, output_tokens=300, cache_read_tokens=1_000, reasoning_tokens=100)


#: Every test prices from the packaged table, with a cache of its own (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_price_cache")


@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5", "deepseek-chat", "gemini-2.5-flash"])
@pytest.mark.parametrize("usage", [CACHED, SMALL], ids=["tiered_cache_write", "small_cache_read"])
def test_cost_matches_genai_prices_calculation(model, usage):
    reference = calc_price(
        GenaiUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model,
    )
    assert cost_usd(model, usage) == pytest.approx(float(reference.total_price), rel=1e-12)


def test_each_token_is_charged_once_at_its_own_rate():
    rates = calc_price(GenaiUsage(input_tokens=0, output_tokens=0), "gpt-4o").model_price
    usage = Usage(
        input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=400_000, reasoning_tokens=300_000
    )
    per_tok_in, per_tok_out, per_tok_cr = (
        float(rates.input_mtok) / 1e6,
        float(rates.output_mtok) / 1e6,
        float(rates.cache_read_mtok) / 1e6,
    )
    expected = 600_000 * per_tok_in + 400_000 * per_tok_cr + 1_000_000 * per_tok_out
    assert cost_usd("gpt-4o", usage) == pytest.approx(expected)
    assert per_tok_cr < per_tok_in


@pytest.mark.parametrize(
    "name, provider, canonical",
    [
        ("openai/gpt-4o", None, "gpt-4o"),
        ("gpt-4o-2024-08-06", None, "gpt-4o"),
        ("anthropic/claude-sonnet-4-5", None, "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", None, "claude-sonnet-4-5"),
        ("deepseek/deepseek-chat", None, "deepseek-chat"),
        ("GPT-4o", "openai", "gpt-4o"),
    ],
)
def test_prefixed_and_dated_names_resolve_to_the_same_price(name, provider, canonical):
    assert cost_usd(name, SMALL, provider) == pytest.approx(cost_usd(canonical, SMALL))
    assert price_call(name, SMALL, provider).source.endswith("/" + canonical)


def test_bedrock_converse_name_resolves_through_its_prefix():
    priced = price_call("converse/jp.anthropic.claude-haiku-4-5-20251001-v1:0", SMALL)
    assert priced.cost_usd is not None and priced.source.startswith("genai-prices:aws/")


@pytest.mark.parametrize("model", ["totally-unknown-model", "openai/openrouter-llama-4-maverick", ""])
def test_unknown_model_is_unpriced_none_not_zero(model):
    assert cost_usd(model, SMALL) is None


def test_unknown_usage_has_no_cost():
    assert cost_usd("gpt-4o", None) is None


def test_zero_usage_of_priced_model_costs_zero():
    assert cost_usd("gpt-4o", Usage()) == 0.0


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".toml"])
def test_user_price_file_adds_a_model_in_each_format(tmp_path, suffix):
    path = tmp_path / f"prices{suffix}"
    if suffix == ".yaml":
        path.write_text(
            "models:\n  my-finetune:\n    input_usd_per_mtok: 2\n"
            "    output_usd_per_mtok: 8\n    cache_read_usd_per_mtok: 0.5\n"
        )
    elif suffix == ".json":
        path.write_text(
            json.dumps(
                {
                    "models": {
                        "my-finetune": {
                            "input_usd_per_mtok": 2,
                            "output_usd_per_mtok": 8,
                            "cache_read_usd_per_mtok": 0.5,
                        }
                    }
                }
            )
        )
    else:
        path.write_text(
            "[models.my-finetune]\ninput_usd_per_mtok = 2\n"
            "output_usd_per_mtok = 8\ncache_read_usd_per_mtok = 0.5\n"
        )
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=500_000)
    assert cost_usd("my-finetune", usage, prices_file=path) == pytest.approx(1.0 + 0.25 + 8.0)
    assert cost_usd("vendor/my-finetune-20250101", usage, prices_file=path) == pytest.approx(9.25)


def test_user_price_file_from_env_overrides_genai_prices(tmp_path, monkeypatch):
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  gpt-4o:\n    input_usd_per_ktok: 0.001\n    output_usd_per_token: 0.000002\n")
    monkeypatch.setenv(ENV_PRICES_FILE, str(path))
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=400_000)
    # No cache_read price in the file: cache reads are input tokens at the input rate.
    assert cost_usd("gpt-4o", usage) == pytest.approx(1.0 + 2.0)
    assert price_call("gpt-4o", usage).source.startswith("user:")


@pytest.mark.parametrize(
    "body, named",
    [
        (
            "models:\n  m:\n    input_usd_per_mtok: 1\n    output_usd_per_mtok: 1\n    input_eur_per_mtok: 1\n",
            "input_eur_per_mtok",
        ),
        ("models:\n  m:\n    input_usd_per_mtok: 1\n", "output_usd_per_mtok"),
        ("models:\n  m:\n    input_usd_per_mtok: -1\n    output_usd_per_mtok: 1\n", "input_usd_per_mtok"),
        ("prices:\n  m: {}\n", "prices"),
        ("models:\n  m:\n    input: 1\n    output_usd_per_mtok: 1\n", "'input'"),
    ],
    ids=["unknown_unit", "missing_output", "negative", "unknown_top_level", "unit_missing"],
)
def test_bad_price_file_is_rejected_naming_the_key(tmp_path, body, named):
    path = tmp_path / "prices.yaml"
    path.write_text(body)
    with pytest.raises(ValueError, match=named):
        load_price_file(path)


def test_price_file_with_unsupported_extension_is_rejected(tmp_path):
    path = tmp_path / "prices.ini"
    path.write_text("x")
    with pytest.raises(ValueError, match="extension"):
        load_price_file(path)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "-5"])
def test_non_finite_or_negative_price_is_rejected_naming_the_key(tmp_path, value):
    path = tmp_path / "prices.yaml"
    path.write_text(f"models:\n  m:\n    input_usd_per_mtok: {value}\n    output_usd_per_mtok: 1\n")
    with pytest.raises(ValueError, match="models.m.input_usd_per_mtok must be a finite number >= 0"):
        load_price_file(path)


def test_json_price_file_with_nan_is_rejected(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text('{"models": {"m": {"input_usd_per_mtok": 1, "output_usd_per_mtok": NaN}}}')
    with pytest.raises(ValueError, match="output_usd_per_mtok"):
        load_price_file(path)


def test_price_file_with_byte_order_mark_loads(tmp_path):
    path = tmp_path / "prices.json"
    body = json.dumps({"models": {"m": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 2}}})
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert cost_usd("m", Usage(1_000_000, 0), prices_file=path) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "suffix, raw, rule",
    [
        (".yaml", b"models:\n  m: {input_usd_per_mtok: 1\n", "not a valid price file"),
        (".yaml", "models:\n  caf\xe9:\n    input_usd_per_mtok: 1\n".encode("latin-1"), "UTF-8"),
    ],
    ids=["yaml_syntax", "latin1"],
)
def test_unparsable_price_file_is_a_value_error_naming_the_file(tmp_path, suffix, raw, rule):
    path = tmp_path / f"prices{suffix}"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=rule) as info:
        load_price_file(path)
    assert str(path) in str(info.value)


def test_check_prices_file_names_the_environment_variable_for_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_PRICES_FILE, str(tmp_path / "gone.yaml"))
    with pytest.raises(ValueError, match=f"gone.yaml.*{ENV_PRICES_FILE}"):
        check_prices_file()


def test_check_prices_file_does_nothing_without_a_price_file():
    check_prices_file()  # no argument, no environment variable: genai-prices only
    assert price_call("gpt-4o", SMALL).source.startswith("genai-prices:")


@pytest.mark.parametrize(
    "output_tokens, expected", [(None, 1_000 * 10e-6), (200, 800 * 2.5e-6 + 200 * 10e-6), (0, 1_000 * 2.5e-6)]
)
def test_reservation_estimate_is_worst_case_without_a_split(output_tokens, expected):
    assert estimate_cost_usd("gpt-4o", 1_000, output_tokens) == pytest.approx(expected)
