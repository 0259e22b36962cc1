"""Text formatting of dashboard figures: a missing value never reads as zero."""

from __future__ import annotations

import pandas as pd
import pytest

from budgetlens.dashboard import formatting


@pytest.mark.parametrize(
    "value, text",
    [
        (None, "unpriced"),
        (float("nan"), "unpriced"),
        (0.0, "$0.00"),
        (0.0039, "$0.0039"),  # a preset cost the Presets page showed as $0.00
        (0.014, "$0.014"),
        (0.44, "$0.44"),
        (0.009165, "$0.009165"),  # 4 significant figures, as the CLI's tables
        (0.01234, "$0.01234"),
        (0.00001, "$0.00001"),
        (0.5, "$0.50"),
        (1234.5, "$1,234.50"),
    ],
)
def test_usd_is_unpriced_when_unknown_and_never_zero_dollars(value, text):
    assert formatting.format_usd(value) == text


@pytest.mark.parametrize(
    "value, text",
    [(None, "n/a"), (950, "950"), (12_345, "12.3K"), (1_200_000, "1.20M")],
)
def test_tokens_read_with_k_and_m_suffixes(value, text):
    assert formatting.format_tokens(value) == text


def test_percent_of_no_finished_run_is_not_zero():
    assert formatting.format_percent(None) == "n/a"
    assert formatting.format_percent(0.205) == "20.5 %"


@pytest.mark.parametrize("value", [None, float("nan"), pd.NA, pd.NaT])
def test_every_kind_of_missing_cost_is_unpriced(value):
    assert formatting.format_usd(value) == "unpriced"


@pytest.mark.parametrize(
    "change, current, recommended, text",
    [
        (76.2, 150_000, 264_000, "+76 %"),
        (-16.7, 30, 25, "-17 %"),
        (None, None, 43_000, "no current limit"),
        (None, pd.NA, 43_000, "no current limit"),
        (None, 20_000, None, "no data"),
        (None, None, None, "no data"),
        (None, 0, 5, "—"),
    ],
)
def test_changes_say_why_there_is_no_percentage(change, current, recommended, text):
    assert formatting.format_change(change, current=current, recommended=recommended) == text


@pytest.mark.parametrize("value", [None, float("nan"), pd.NA, pd.NaT])
def test_missing_values_read_as_an_em_dash_never_none(value):
    assert formatting.is_missing(value)
    assert formatting.text(value) == "—"


@pytest.mark.parametrize(
    "column, fmt",
    [
        ("p95_total_tokens", "%,.1f"),  # 56,463.5 stays 56,463.5, as the CLI prints it
        ("p50_turns", "%,.1f"),
        ("p95_duration_s", "%,.1f"),
        ("max_total_tokens", "%,.0f"),
        ("input_tokens", "%,.0f"),
        ("n", "%,.0f"),
        ("p95_cost_usd", None),
        ("task_type", None),
    ],
)
def test_percentiles_keep_one_decimal_and_counts_are_whole(column, fmt):
    assert formatting.number_format(column) == fmt


@pytest.mark.parametrize(
    "value, runs, text",
    [(0.2014, 10, "20.1 %"), (None, 10, "no budget"), (None, 0, "n/a"), (0.0, 10, "0.0 %")],
)
def test_hit_rate_without_budgeted_runs_reads_no_budget_not_zero(value, runs, text):
    assert formatting.format_hit_rate(value, runs) == text


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.84, "0.8 s"),
        (42.4, "42 s"),
        (209, "3 min 29 s"),
        (12_554.2, "3 h 29 min"),  # the runaway the issue quotes: 12,554.2 s
        (2 * 86400 + 4 * 3600 + 59, "2 d 4 h"),
        (None, "n/a"),
        (float("nan"), "n/a"),
    ],
)
def test_durations_read_in_hours_and_minutes_not_thousands_of_seconds(seconds, text):
    assert formatting.format_duration(seconds) == text


@pytest.mark.parametrize("value, text", [(200_000, "200K"), (1_500_000, "1.5M"), (950, "950"), (0, "0")])
def test_axis_ticks_are_compact(value, text):
    assert formatting.format_compact(value) == text


@pytest.mark.parametrize(
    "column, label",
    [
        ("task_type", "Task type"),
        ("p50_total_tokens", "P50 total tokens"),
        ("max_cost_usd", "Max cost (USD)"),
        ("cost_usd", "Cost (USD)"),
        ("p95_duration_s", "P95 duration (s)"),
        ("reserved_tokens", "Reserved tokens"),
        ("from_model", "From model"),
        ("run_id", "Run ID"),
    ],
)
def test_columns_get_human_labels(column, label):
    assert formatting.column_label(column) == label


@pytest.mark.parametrize(
    "value",
    [
        "![x](http://attacker.example/a.png)",
        "[sign in again](https://attacker.example/phish)",
        '<img src="http://attacker.example/i.png">',
        ":red[alarm] :material/warning: $x^2$",
        "http://attacker.example/bare www.attacker.example",
        "`code` **bold** _it_ ~~del~~ | table |",
    ],
)
def test_safe_text_escapes_every_markdown_punctuation_character(value):
    escaped = formatting.safe_text(value)
    assert "p://" not in escaped.replace("\\", "") and "www." not in escaped.replace("\\", "")
    escaped = escaped.replace("\u2060", "")  # the word joiners that break bare-URL autolinks
    unescaped = []
    chars = iter(escaped)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars)
            assert nxt in formatting._MARKDOWN_PUNCTUATION
            unescaped.append(nxt)
        else:
            assert ch not in formatting._MARKDOWN_PUNCTUATION, (ch, escaped)
            unescaped.append(ch)
    assert "".join(unescaped) == value


def test_safe_text_turns_line_breaks_into_spaces_and_cuts_long_values():
    assert formatting.safe_text("a\n# b\r\nc") == "a \\# b  c"
    assert formatting.safe_text("x" * 300, max_chars=10) == "x" * 10 + "…"
    assert formatting.safe_text(None) == formatting.MISSING
    assert formatting.safe_text("code_generation") == "code\\_generation"
