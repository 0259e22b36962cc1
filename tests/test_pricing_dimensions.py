"""Issue 9: every dimension the provider bills on, at the price of the call's date.

Each right value is computed independently, by calling genai-prices' own ``calc_price`` on a
usage written out by hand (never through budgetlens' normalization or pricing), and compared
with what ``cost_usd``, ``RunBudget.record``, the collector mapping and an importer give.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest
from genai_prices import Usage as GenaiUsage
from genai_prices import calc_price

from budgetlens import BudgetExceeded, RunBudget
from budgetlens.config import ENV_PRICES_FILE
from budgetlens.pricing import (
    check_prices_file,
    cost_usd,
    load_price_file,
    price_call,
    price_version,
    usage_details,
    usage_from_details,
)
from budgetlens.usage import Usage, normalize_usage

SEARCH_DAY = dt.datetime(2026, 8, 17, 12, 0, tzinfo=dt.UTC)  # gpt-5.6-sol's price changed 2026-08-21


#: Every test prices from the packaged table, with a cache of its own (conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_price_cache")


def _reference(model: str, at: dt.datetime | None = None, context=None, **usage) -> float:
    """genai-prices' own calculation over a hand-written usage: the right column."""
    return float(
        calc_price(GenaiUsage(**usage), model, genai_request_timestamp=at, price_context=context).total_price
    )


# --- the issue's table, row by row, through cost_usd ---------------------------------------------

#: (id, model, provider, raw provider usage, genai-prices usage written by hand, issue's value)
ROWS = [
    (
        "anthropic_web_search",
        "claude-sonnet-4-5",
        "anthropic",
        {"input_tokens": 1_000, "output_tokens": 200, "server_tool_use": {"web_search_requests": 3}},
        {"input_tokens": 1_000, "output_tokens": 200, "web_searches": 3},
        0.036,
    ),
    (
        "openai_chat_audio",
        "gpt-4o-realtime-preview",
        "openai",
        {
            "prompt_tokens": 1_000,
            "completion_tokens": 500,
            "prompt_tokens_details": {"audio_tokens": 800, "cached_tokens": 0},
            "completion_tokens_details": {"audio_tokens": 400, "reasoning_tokens": 0},
        },
        {"input_tokens": 1_000, "output_tokens": 500, "input_audio_tokens": 800, "output_audio_tokens": 400},
        0.067,
    ),
    (
        "gemini_prompt_audio",
        "gemini-2.5-flash",
        "gcp.gemini",
        {
            "promptTokenCount": 1_000,
            "candidatesTokenCount": 100,
            "promptTokensDetails": [
                {"modality": "AUDIO", "tokenCount": 900},
                {"modality": "TEXT", "tokenCount": 100},
            ],
        },
        {"input_tokens": 1_000, "output_tokens": 100, "input_audio_tokens": 900},
        0.00118,
    ),
    (
        "anthropic_1h_cache_write",
        "claude-sonnet-4-5",
        "anthropic",
        {
            "input_tokens": 100,
            "output_tokens": 100,
            "cache_creation_input_tokens": 10_000,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 10_000},
        },
        {
            "input_tokens": 10_100,
            "output_tokens": 100,
            "cache_write_tokens": 10_000,
            "cache_write_1h_tokens": 10_000,
        },
        None,
    ),
]


@pytest.mark.parametrize("name, model, provider, raw, reference, issue_value", ROWS, ids=[r[0] for r in ROWS])
def test_each_row_of_the_issue_costs_what_genai_prices_bills(
    name, model, provider, raw, reference, issue_value
):
    expected = _reference(model, **reference)
    if issue_value is not None:
        assert expected == pytest.approx(issue_value)  # the issue's right column
    usage = normalize_usage(raw, provider)
    assert cost_usd(model, usage, provider) == pytest.approx(expected, rel=1e-12)


def test_one_hour_cache_writes_cost_more_than_five_minute_writes():
    five = normalize_usage(
        {"input_tokens": 100, "output_tokens": 100, "cache_creation_input_tokens": 10_000}, "anthropic"
    )
    one_hour = normalize_usage(dict(ROWS[3][3]), "anthropic")
    assert one_hour.cache_write_1h_tokens == 10_000
    assert cost_usd("claude-sonnet-4-5", one_hour) > cost_usd("claude-sonnet-4-5", five)
    assert cost_usd("claude-sonnet-4-5", five) == pytest.approx(
        _reference("claude-sonnet-4-5", input_tokens=10_100, output_tokens=100, cache_write_tokens=10_000)
    )


def test_a_call_is_priced_at_the_price_in_force_on_its_date():
    usage = Usage(input_tokens=60_000, output_tokens=5_000, cache_read_tokens=10_000)
    hand = {"input_tokens": 60_000, "output_tokens": 5_000, "cache_read_tokens": 10_000}
    then = _reference("gpt-5.6-sol", SEARCH_DAY, **hand)
    today = _reference("gpt-5.6-sol", dt.datetime(2026, 11, 30, tzinfo=dt.UTC), **hand)
    assert then != today  # the price changed on 2026-08-21
    assert cost_usd("gpt-5.6-sol", usage, at=SEARCH_DAY) == pytest.approx(then)
    assert cost_usd("gpt-5.6-sol", usage, at=SEARCH_DAY.replace(tzinfo=None)) == pytest.approx(
        then
    )  # naive = UTC
    assert cost_usd("gpt-5.6-sol", usage, at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC)) == pytest.approx(today)


def test_per_million_figure_in_a_per_token_key_is_refused_naming_the_key_and_unit(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  my-model:\n    input_usd_per_token: 0.071\n    output_usd_per_mtok: 0.2\n")
    with pytest.raises(ValueError, match="input_usd_per_token") as info:
        load_price_file(path)
    assert "input_usd_per_mtok" in str(info.value)  # the plausible unit
    assert "allow_implausible_prices" in str(info.value)


@pytest.mark.parametrize("where", ["top", "model"])
def test_an_intentional_high_price_is_accepted_when_the_file_says_so(tmp_path, where):
    path = tmp_path / "prices.yaml"
    flag_top = "allow_implausible_prices: true\n" if where == "top" else ""
    flag_model = "    allow_implausible_prices: true\n" if where == "model" else ""
    path.write_text(
        f"{flag_top}models:\n  my-model:\n{flag_model}    input_usd_per_token: 0.071\n    output_usd_per_mtok: 1\n"
    )
    assert cost_usd("my-model", Usage(10, 0), prices_file=path) == pytest.approx(0.71)


def test_plausible_prices_pass_the_check(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  my-model:\n    input_usd_per_token: 0.000071\n    output_usd_per_ktok: 0.3\n")
    assert cost_usd("my-model", Usage(1_000, 1_000), prices_file=path) == pytest.approx(0.071 + 0.3)


# --- dimensions beyond the table -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, provider, model, reference",
    [
        (  # OpenAI Realtime / Responses details with cached audio
            {
                "input_tokens": 2_000,
                "output_tokens": 600,
                "input_token_details": {
                    "cached_tokens": 1_000,
                    "audio_tokens": 1_500,
                    "cached_tokens_details": {"audio_tokens": 800},
                },
                "output_token_details": {"audio_tokens": 500},
            },
            "openai",
            "gpt-4o-realtime-preview",
            {
                "input_tokens": 2_000,
                "output_tokens": 600,
                "cache_read_tokens": 1_000,
                "input_audio_tokens": 1_500,
                "cache_audio_read_tokens": 800,
                "output_audio_tokens": 500,
            },
        ),
        (  # Gemini cached audio
            {
                "promptTokenCount": 3_000,
                "candidatesTokenCount": 100,
                "cachedContentTokenCount": 2_000,
                "promptTokensDetails": [{"modality": "AUDIO", "tokenCount": 2_500}],
                "cacheTokensDetails": [{"modality": "AUDIO", "tokenCount": 2_000}],
            },
            "gcp.gemini",
            "gemini-2.5-flash",
            {
                "input_tokens": 3_000,
                "output_tokens": 100,
                "cache_read_tokens": 2_000,
                "input_audio_tokens": 2_500,
                "cache_audio_read_tokens": 2_000,
            },
        ),
        (  # Bedrock Converse cache writes by TTL
            {
                "inputTokens": 50,
                "outputTokens": 20,
                "cacheWriteInputTokens": 4_000,
                "cacheDetails": [{"ttl": "1h", "inputTokens": 4_000}],
            },
            "aws.bedrock",
            "claude-sonnet-4-5",
            {
                "input_tokens": 4_050,
                "output_tokens": 20,
                "cache_write_tokens": 4_000,
                "cache_write_1h_tokens": 4_000,
            },
        ),
        (  # LiteLLM dict with Anthropic's server tool use
            {"prompt_tokens": 500, "completion_tokens": 50, "server_tool_use": {"web_search_requests": 2}},
            "anthropic",
            "claude-sonnet-4-5",
            {"input_tokens": 500, "output_tokens": 50, "web_searches": 2},
        ),
    ],
    ids=["openai_realtime_cached_audio", "gemini_cached_audio", "bedrock_1h_cache", "litellm_web_search"],
)
def test_every_provider_shape_carries_its_billing_dimensions(raw, provider, model, reference):
    usage = normalize_usage(raw, provider)
    assert cost_usd(model, usage) == pytest.approx(_reference(model, **reference), rel=1e-12)


def test_service_tier_stated_by_the_response_selects_its_price():
    response = {"service_tier": "batch", "usage": {"input_tokens": 10_000, "output_tokens": 2_000}}
    usage = normalize_usage(response, "anthropic")
    assert usage.service_tier == "batch"
    batch = _reference(
        "claude-sonnet-4-5",
        context={"service_tier": "batch", "processing": "batch"},
        input_tokens=10_000,
        output_tokens=2_000,
    )
    standard = _reference("claude-sonnet-4-5", input_tokens=10_000, output_tokens=2_000)
    assert batch < standard
    assert cost_usd("claude-sonnet-4-5", usage) == pytest.approx(batch)


def test_a_tool_fee_the_model_has_no_price_for_is_partly_unpriced_not_zero(caplog):
    usage = Usage(input_tokens=1_000, output_tokens=100, code_executions=2)
    priced = price_call("gpt-4o-mini", usage)
    assert priced.unpriced == ("code_executions",)
    assert priced.cost_usd == pytest.approx(_reference("gpt-4o-mini", input_tokens=1_000, output_tokens=100))
    price_call("gpt-4o-mini", usage)
    warned = [r for r in caplog.records if r.name == "budgetlens.pricing" and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "code_executions" in warned[0].getMessage()


def test_an_unresolved_name_is_logged_once_at_warning_and_unpriced(caplog):
    for _ in range(3):
        assert price_call("acme-llm-7", Usage(10, 10)).cost_usd is None
    warned = [r.getMessage() for r in caplog.records if r.name == "budgetlens.pricing"]
    assert len(warned) == 1 and "acme-llm-7" in warned[0]


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("gpt-4-0613", "gpt-4"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("claude-opus-4-1:0", "claude-opus-4-1"),
        ("openrouter/openai/gpt-4o", "gpt-4o"),
    ],
)
def test_version_date_region_and_provider_spellings_resolve(name, canonical):
    usage = Usage(1_000, 100)
    assert price_call(name, usage).source.endswith("/" + canonical)
    assert cost_usd(name, usage) == pytest.approx(
        _reference(canonical, input_tokens=1_000, output_tokens=100)
    )


def test_a_dated_entry_wins_over_its_base_model():
    # gpt-3.5-turbo-0301 has its own entry in genai-prices; stripping "-0301" would be wrong
    assert price_call("gpt-3.5-turbo-0301", Usage(1_000, 100)).source == "genai-prices:openai/gpt-3.5-0301"


def test_user_price_file_bills_every_dimension_it_names(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(
        "models:\n"
        "  voice-bot:\n"
        "    input_usd_per_mtok: {base: 1.0, tiers: [{above_input_tokens: 100000, price: 2.0}]}\n"
        "    output_usd_per_mtok: 4.0\n"
        "    input_audio_usd_per_mtok: 10.0\n"
        "    web_searches_usd_per_kcount: 10\n"
        "    requests_usd_per_count: 0.001\n"
        "  cache-bot:\n"
        "    input_usd_per_mtok: 1.0\n"
        "    output_usd_per_mtok: 4.0\n"
        "    cache_write_usd_per_mtok: 1.25\n"
        "    cache_write_1h_usd_per_mtok: 3.0\n"
    )
    usage = Usage(input_tokens=2_000, output_tokens=1_000, input_audio_tokens=1_000, web_search_requests=3)
    # by hand: 1,000 text input at $1/M, 1,000 audio at $10/M, 1,000 output at $4/M, 3 searches
    # at $10/1,000, one request at $0.001
    expected = 1_000e-6 + 1_000 * 10e-6 + 1_000 * 4e-6 + 0.03 + 0.001
    priced = price_call("voice-bot", usage, prices_file=path)
    assert priced.cost_usd == pytest.approx(expected)
    assert priced.source == f"user:{path}" and priced.price_version.startswith(f"user:{path}#")
    big = Usage(input_tokens=200_000, output_tokens=0)
    assert cost_usd("voice-bot", big, prices_file=path) == pytest.approx(200_000 * 2e-6 + 0.001)  # tier
    writes = Usage(input_tokens=3_000, output_tokens=0, cache_write_tokens=2_000, cache_write_1h_tokens=500)
    # 1,000 input at $1/M, 1,500 5-minute writes at $1.25/M, 500 1-hour writes at $3/M
    assert cost_usd("cache-bot", writes, prices_file=path) == pytest.approx(
        1e-3 + 1_500 * 1.25e-6 + 500 * 3e-6
    )


@pytest.mark.parametrize(
    "entry, named",
    [
        (
            "input_usd_per_mtok: 1\n    output_usd_per_mtok: 1\n    web_searches_usd_per_mtok: 1",
            "web_searches_usd_per_mtok",
        ),
        ("input_usd_per_mtok: {base: 1}\n    output_usd_per_mtok: 1", "tiered price"),
        (
            "input_usd_per_mtok: {base: 1, tiers: [{above_input_tokens: -5, price: 2}]}\n    output_usd_per_mtok: 1",
            "above_input_tokens",
        ),
        (
            "input_usd_per_mtok: 1\n    output_usd_per_mtok: 1\n    cache_write_1h_usd_per_mtok: 2",
            "cache_write_usd_per_mtok",
        ),
    ],
    ids=["token_unit_on_a_count", "tiers_missing", "negative_threshold", "missing_ancestor"],
)
def test_bad_dimension_keys_are_refused_by_name(tmp_path, entry, named):
    path = tmp_path / "prices.yaml"
    path.write_text(f"models:\n  m:\n    {entry}\n")
    with pytest.raises(ValueError, match=named):
        load_price_file(path)


def test_usage_details_round_trip_to_the_same_usage():
    usage = normalize_usage(dict(ROWS[0][3]), "anthropic")
    row = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "usage_details": usage_details(usage),
    }
    assert json.loads(row["usage_details"]) == {"web_search_requests": 3}
    assert usage_from_details(row) == usage


# --- through the guard ---------------------------------------------------------------------------


def test_record_charges_web_search_fees_and_the_next_turn_stops_on_cost():
    run = RunBudget(max_cost_usd=0.02, provider="anthropic")
    run.before_turn()
    res = run.reserve(1_200, "claude-sonnet-4-5", output_tokens=200)
    run.record(dict(ROWS[0][3]), model="claude-sonnet-4-5", reservation=res)
    expected = _reference("claude-sonnet-4-5", input_tokens=1_000, output_tokens=200, web_searches=3)
    assert run.stats().cost_usd == pytest.approx(expected)
    with pytest.raises(BudgetExceeded) as stop:
        run.before_turn()
    assert stop.value.reason == "budget_cost"


def test_record_prices_audio_and_reserve_estimates_through_the_same_path():
    run = RunBudget(max_cost_usd=10.0, provider="openai")
    res = run.reserve(1_500, "gpt-4o-realtime-preview", output_tokens=500)
    assert res.cost_usd == pytest.approx(
        _reference("gpt-4o-realtime-preview", input_tokens=1_000, output_tokens=500)
    )
    run.record(dict(ROWS[1][3]), model="gpt-4o-realtime-preview", reservation=res)
    assert run.stats().cost_usd == pytest.approx(0.067)


# --- through the collector mapping and an importer ----------------------------------------------


def _otlp_call(start: dt.datetime, model: str, attributes: dict) -> dict:
    nanos = int(start.timestamp() * 1e9)
    attrs = [{"key": "gen_ai.request.model", "value": {"stringValue": model}}]
    attrs += [{"key": k, "value": {"intValue": str(v)}} for k, v in attributes.items()]
    attrs.append({"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}})
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": f"chat {model}",
        "kind": 3,
        "startTimeUnixNano": str(nanos),
        "endTimeUnixNano": str(nanos + 2_000_000_000),
        "attributes": attrs,
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def test_collector_prices_a_backfilled_span_at_its_start_date():
    from budgetlens.otlp.mapping import map_otlp_json

    document = _otlp_call(
        SEARCH_DAY,
        "gpt-5.6-sol",
        {
            "gen_ai.usage.input_tokens": 60_000,
            "gen_ai.usage.output_tokens": 5_000,
            "gen_ai.usage.cache_read.input_tokens": 10_000,
        },
    )
    (call,) = map_otlp_json(document).calls
    hand = {"input_tokens": 60_000, "output_tokens": 5_000, "cache_read_tokens": 10_000}
    assert call["cost_usd"] == pytest.approx(_reference("gpt-5.6-sol", SEARCH_DAY, **hand))
    assert call["price_version"] == price_version()


def _codex_rollout(path: Path, when: dt.datetime, usage: dict) -> None:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    lines = [
        {
            "timestamp": stamp,
            "type": "session_meta",
            "payload": {"id": "rollout-issue9", "model_provider": "openai"},
        },
        {"timestamp": stamp, "type": "turn_context", "payload": {"model": "gpt-5.6-sol", "cwd": "/work"}},
        {
            "timestamp": stamp,
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {"total_token_usage": usage, "last_token_usage": usage},
            },
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


CODEX_USAGE = {
    "input_tokens": 60_000,
    "cached_input_tokens": 10_000,
    "output_tokens": 5_000,
    "reasoning_output_tokens": 1_000,
    "total_tokens": 65_000,
}


def _calls(db_path: Path) -> list[dict]:
    from budgetlens.store import read_connection

    with read_connection(db_path) as conn:
        cursor = conn.execute("SELECT * FROM model_calls")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


@pytest.mark.system  # imports into a store: seconds
def test_codex_import_prices_each_call_at_its_date_and_keeps_the_price_version(tmp_path, db_path):
    from budgetlens.importers import import_paths

    path = tmp_path / "rollout-2026-08-17-issue9.jsonl"
    _codex_rollout(path, SEARCH_DAY, CODEX_USAGE)
    import_paths("codex", [path], db_path)
    (call,) = _calls(db_path)
    hand = {"input_tokens": 60_000, "output_tokens": 5_000, "cache_read_tokens": 10_000}
    assert call["cost_usd"] == pytest.approx(_reference("gpt-5.6-sol", SEARCH_DAY, **hand))
    assert call["cost_usd"] != pytest.approx(_reference("gpt-5.6-sol", None, **hand))  # not today's price
    assert call["price_version"] == price_version()


@pytest.mark.system  # reprices a store: seconds
def test_reprice_changes_only_calls_priced_with_another_version(tmp_path, db_path, capsys):
    from budgetlens.cli import main
    from budgetlens.importers import import_paths
    from budgetlens.store import read_connection, write_connection

    path = tmp_path / "rollout-2026-08-17-issue9.jsonl"
    _codex_rollout(path, SEARCH_DAY, CODEX_USAGE)
    import_paths("codex", [path], db_path)
    (call,) = _calls(db_path)
    right = call["cost_usd"]
    assert main(["reprice", "--db", str(db_path)]) == 0  # same version: nothing changes
    assert "re-priced 0 of 0" in capsys.readouterr().out
    with write_connection(db_path) as conn:  # as if an older genai-prices had priced it
        conn.execute("UPDATE model_calls SET cost_usd = 1.0, price_version = 'genai-prices 0.0.1'")
    assert main(["reprice", "--db", str(db_path), "--dry-run"]) == 0
    assert "would re-price 1 of 1" in capsys.readouterr().out
    assert _calls(db_path)[0]["cost_usd"] == 1.0
    assert main(["reprice", "--db", str(db_path)]) == 0
    (call,) = _calls(db_path)
    assert (call["cost_usd"], call["price_version"]) == (pytest.approx(right), price_version())
    with read_connection(db_path) as conn:
        (run_cost,) = conn.execute("SELECT cost_usd FROM runs").fetchone()
    assert run_cost == pytest.approx(right)  # the rollup follows


def test_reprice_of_a_missing_store_is_an_error(tmp_path, capsys):
    from budgetlens.cli import main

    assert main(["reprice", "--db", str(tmp_path / "none.duckdb")]) == 1
    assert "no store" in capsys.readouterr().err


def test_check_prices_file_refuses_an_implausible_price_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  m:\n    input_usd_per_token: 0.071\n    output_usd_per_mtok: 1\n")
    monkeypatch.setenv(ENV_PRICES_FILE, str(path))
    with pytest.raises(ValueError, match=f"input_usd_per_token.*{ENV_PRICES_FILE}"):
        check_prices_file()


def test_genai_prices_loads_before_the_run_clock_starts(monkeypatch):
    # The first priced call of a process loads genai-prices' data (about a second); a guarded run
    # must not carry that in its duration: the guard warms the prices before it reads its clock.
    from budgetlens import RunBudget
    from budgetlens.guard import run_budget

    order: list[str] = []
    monkeypatch.setattr(run_budget, "warm_prices", lambda: order.append("warm"))

    def clock() -> float:
        order.append("clock")
        return 0.0

    RunBudget(model_chain=("gpt-4o", "gpt-4o-mini"), clock=clock)
    assert order[:2] == ["warm", "clock"]
    order.clear()
    RunBudget(max_total_tokens=1_000, clock=clock)  # no model, no cost limit: nothing to price
    assert order == ["clock"]


def test_guard_spans_bring_the_whole_cost_into_the_collector_rows():
    from _collector_helpers import SpanRecorder
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from budgetlens.otlp.mapping import map_request

    recorder = SpanRecorder()
    with RunBudget(max_cost_usd=1.0, provider="anthropic", tracer=recorder.tracer) as run:
        res = run.reserve(1_200, "claude-sonnet-4-5", output_tokens=200)
        run.record(dict(ROWS[0][3]), model="claude-sonnet-4-5", reservation=res)
    (call,) = map_request(encode_spans(recorder.spans())).calls
    assert call["cost_usd"] == pytest.approx(
        _reference("claude-sonnet-4-5", input_tokens=1_000, output_tokens=200, web_searches=3)
    )
