"""Text formatting of dashboard figures: a missing value never reads as zero."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboard import formatting


@pytest.mark.parametrize(
    "value, text",
    [
        (None, "unpriced"),
        (float("nan"), "unpriced"),
        (0.0, "$0.0000"),
        (0.01234, "$0.0123"),
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


@pytest.mark.parametrize("value, text", [(76.2, "+76 %"), (-16.7, "-17 %"), (None, "new")])
def test_changes_read_as_signed_percent_or_new(value, text):
    assert formatting.format_change(value) == text
