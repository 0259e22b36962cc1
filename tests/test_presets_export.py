"""The preset document: shape, plain types, and the same content in YAML, TOML and JSON, which
the guard loads back."""

from __future__ import annotations

import datetime as dt
import json
import tomllib

import numpy as np
import pandas as pd
import pytest
import yaml

from budgetlens.analysis import preset_export as presets_export
from budgetlens.analysis import views as analysis
from budgetlens.guard.preset_file import FORMAT_KEY, FORMAT_VERSION, LIMIT_KEYS, load_preset

STAMP = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)


@pytest.fixture
def baselines_df() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "task_type": "code_generation",
                "n": np.int64(212),
                "low_sample": np.bool_(False),
                "p50_total_tokens": 38211.5,
                "p95_total_tokens": 60400.0,
                "max_total_tokens": 91000,
                "p95_input_tokens": 52000.0,
                "p95_output_tokens": 8000.0,
                "p95_turns": 20.2,
                "p95_tool_calls": 29.6,
                "p95_duration_s": 201.0,
                "p95_cost_usd": 1.0731,
            },
            {
                "task_type": "simple_qa",
                "n": np.int64(7),
                "low_sample": np.bool_(True),
                "p50_total_tokens": 3100.0,
                "p95_total_tokens": 4800.0,
                "max_total_tokens": 5000,
                "p95_input_tokens": 4000.0,
                "p95_output_tokens": 800.0,
                "p95_turns": 2.0,
                "p95_tool_calls": 0.0,
                "p95_duration_s": 9.5,
                "p95_cost_usd": float("nan"),
            },
        ]
    )


@pytest.fixture
def document(baselines_df) -> dict:
    table = analysis.presets(baselines_df, 1.5)
    return presets_export.build_document(table, 1.5, 14, baselines_df, generated_utc=STAMP)


def test_document_has_the_preset_format_shape(document):
    assert document[FORMAT_KEY] == FORMAT_VERSION
    assert document["generated_utc"] == "2026-11-29T10:00:00Z"
    assert (document["multiplier"], document["window_days"]) == (1.5, 14)
    code = document["presets"]["code_generation"]
    assert code["max_total_tokens"] == 91000  # 60400 x 1.5 = 90600 -> 91000
    assert code["max_turns"] == 31  # 30.3 -> 31
    assert code["max_duration_s"] == 305  # 301.5 -> 305
    assert code["max_cost_usd"] == 1.7  # 1.60965 -> 1.7 (2 significant figures)
    assert code["basis"]["n_runs"] == 212 and code["basis"]["low_sample"] is False
    assert code["basis"]["p95_total_tokens"] == 60400.0


def test_document_omits_unknown_limits_and_uses_plain_types(document):
    qa = document["presets"]["simple_qa"]
    assert "max_cost_usd" not in qa  # unpriced: omitted, never 0
    assert qa["basis"]["low_sample"] is True
    for entry in document["presets"].values():
        for key in LIMIT_KEYS:
            if key in entry:
                expected = float if key == "max_cost_usd" else int
                assert type(entry[key]) is expected, key


@pytest.mark.parametrize(
    "fmt, parse", [("yaml", yaml.safe_load), ("toml", tomllib.loads), ("json", json.loads)]
)
def test_every_format_carries_the_same_document(document, fmt, parse):
    assert parse(presets_export.render(document, fmt)) == document


@pytest.mark.parametrize("fmt", ["yaml", "toml", "json"])
def test_guard_loads_the_exported_file(document, tmp_path, fmt):
    path = tmp_path / f"presets{presets_export.FORMATS[fmt]}"
    path.write_text(presets_export.render(document, fmt))
    limits = load_preset("code_generation", path)
    assert limits["max_total_tokens"] == 91000
    assert limits["max_cost_usd"] == 1.7


def test_unknown_format_and_missing_columns_are_refused(document):
    with pytest.raises(ValueError, match="format"):
        presets_export.render(document, "ini")
    with pytest.raises(ValueError, match="task_type"):
        presets_export.build_document(pd.DataFrame({"n": [1]}), 1.5, 14)


def test_basis_states_the_cost_runs_when_fewer_runs_have_a_known_cost(baselines_df):
    base = baselines_df.assign(n_cost=[np.int64(180), np.int64(7)])
    table = analysis.presets(base, 1.5)
    document = presets_export.build_document(table, 1.5, 14, base, generated_utc=STAMP)
    assert document["presets"]["code_generation"]["basis"]["n_cost_runs"] == 180
    assert "n_cost_runs" not in document["presets"]["simple_qa"]["basis"]  # same as n_runs


def test_a_free_model_preset_has_no_zero_limit_and_loads_into_the_guard(tmp_path):
    base = pd.DataFrame(
        [
            {
                "task_type": "free",
                "n": 40,
                "low_sample": False,
                "n_cost": 40,
                "p95_total_tokens": 0.0,
                "p95_turns": 0.0,
                "p95_cost_usd": 0.0,
            }
        ]
    )
    document = presets_export.build_document(analysis.presets(base, 1.5), 1.5, 14, base, generated_utc=STAMP)
    entry = document["presets"]["free"]
    assert (entry["max_total_tokens"], entry["max_turns"]) == (1000, 1)
    assert "max_cost_usd" not in entry
    path = tmp_path / "free.yaml"
    path.write_text(presets_export.render(document, "yaml"))
    assert load_preset("free", path) == {"max_total_tokens": 1000, "max_turns": 1}


def test_basis_keeps_six_significant_digits_of_a_cheap_cost_and_one_decimal_of_tokens():
    base = pd.DataFrame(
        [
            {
                "task_type": "qa",
                "n": 40,
                "low_sample": False,
                "n_cost": 40,
                "p50_total_tokens": 3189.25,
                "p95_total_tokens": 5738.949999999999,
                "p95_duration_s": 35.84999999999999,
                "p95_cost_usd": 0.00574916472,
            }
        ]
    )
    basis = presets_export.build_document(analysis.presets(base, 1.5), 1.5, 14, base, generated_utc=STAMP)[
        "presets"
    ]["qa"]["basis"]
    assert basis["p95_cost_usd"] == 0.00574916  # not 0.005749: 6 figures, not 6 decimals
    assert basis["p95_duration_s"] == 35.85  # no float noise
    assert (basis["p50_total_tokens"], basis["p95_total_tokens"]) == (3189.2, 5738.9)


@pytest.mark.parametrize("fmt", ["yaml", "toml", "json"])
def test_a_low_sample_preset_loads_with_a_warning_naming_the_task_type_and_runs(
    document, tmp_path, fmt, caplog
):
    from budgetlens import RunBudget

    path = tmp_path / f"presets{presets_export.FORMATS[fmt]}"
    path.write_text(presets_export.render(document, fmt))
    with caplog.at_level("WARNING", logger="budgetlens.guard.preset_file"):
        guard = RunBudget.from_preset("simple_qa", str(path))
    assert guard.limits["max_total_tokens"] == document["presets"]["simple_qa"]["max_total_tokens"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "'simple_qa'" in warned[0] and "7 runs" in warned[0], warned
    caplog.clear()
    with caplog.at_level("WARNING", logger="budgetlens.guard.preset_file"):
        RunBudget.from_preset("code_generation", str(path))  # 212 runs: no warning
    assert not caplog.records
