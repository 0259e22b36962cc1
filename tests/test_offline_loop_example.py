"""``docs/examples/offline_loop.py`` (the README's way to try the guard without a provider) runs,
and ends each way with the stop reason the budget gave."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from budgetlens import RunBudget
from budgetlens import semconv as sc

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "offline_loop.py"


def _example():
    spec = importlib.util.spec_from_file_location("offline_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_default_run_is_refused_at_its_token_limit(capsys):
    assert _example().main([]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"stop reason: {sc.STOP_BUDGET_TOKENS}") and "refused" in out


def test_a_call_that_reaches_the_limit_stores_the_limits_reason_not_completed():
    example = _example()
    run = RunBudget(max_total_tokens=1_500)  # the first answer (1,350-2,100 tokens) reaches it
    assert example.run_loop(run) == sc.STOP_BUDGET_TOKENS
    assert run.finish().stop_reason == sc.STOP_BUDGET_TOKENS


def test_a_preset_file_is_loaded_by_task_type(tmp_path, capsys):
    preset = tmp_path / "presets.yaml"
    preset.write_text(yaml.safe_dump({"budgetlens_presets": 1, "presets": {"simple_qa": {"max_turns": 2}}}))
    assert _example().main(["--preset", str(preset)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"stop reason: {sc.STOP_BUDGET_TURNS}")
