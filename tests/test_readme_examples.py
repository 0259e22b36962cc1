"""The README's guard examples (tests/examples/*.py, pasted verbatim into the README) run."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from budgetlens.semconv import STOP_BUDGET_TURNS, STOP_COMPLETED

EXAMPLES = Path(__file__).parent / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.system
@pytest.mark.parametrize(
    "name, last_line",
    [("openai_loop", "completed 3 2 7650"), ("anthropic_loop", "budget_turns 4 4 20408")],
)
def test_example_runs_as_a_script(python, name, last_line):
    proc = subprocess.run(
        [python, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=EXAMPLES.parent.parent,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == last_line


def test_openai_example_completes_within_budget_with_cached_and_reasoning_tokens():
    example = load("openai_loop")
    result = example.run_agent(example.FakeOpenAI(), "task")
    assert (result.stop_reason, result.turns, result.tool_calls) == (STOP_COMPLETED, 3, 2)
    assert result.usage.cache_read_tokens == 2048 and result.usage.reasoning_tokens == 192
    assert result.cost_usd is not None and result.cost_usd > 0


def test_anthropic_example_is_stopped_by_its_turn_limit_with_cache_counted_once():
    example = load("anthropic_loop")
    result = example.run_agent(example.FakeAnthropic(), "task")
    assert (result.stop_reason, result.turns) == (STOP_BUDGET_TURNS, 4)
    assert result.usage.input_tokens == 4 * 12 + 2_000 + (4_000 + 6_000 + 8_000)
    assert result.usage.cache_write_tokens == 2_000
