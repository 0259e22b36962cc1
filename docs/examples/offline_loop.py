"""The guard's loop without a provider: a stand-in model that answers with OpenAI-shaped usage and
keeps "failing" (the generate -> fail -> fix -> retry loop budgetlens exists for), until the
budget stops the run.

Usage: ``python docs/examples/offline_loop.py [--preset presets.yaml --task-type simple_qa]``.
Without a preset file the run gets ``max_total_tokens=20000`` and ``max_turns=30``. Prints one
line per turn and the run's stop reason; with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the run's
spans go to that collector like any other guarded run's.
"""

from __future__ import annotations

import argparse
import random

from budgetlens import Action, BudgetExceeded, RunBudget


def fake_model(turn: int, rng: random.Random) -> dict:
    """An OpenAI chat completion's ``usage``: the prompt grows with every retry."""
    return {
        "prompt_tokens": 1_200 + 900 * turn + rng.randint(0, 300),
        "completion_tokens": rng.randint(150, 600),
    }


def run_loop(run: RunBudget, seed: int = 7, max_steps: int = 100) -> str:
    """Call the stand-in model until the budget stops the run; returns the stored stop reason."""
    rng = random.Random(seed)
    for turn in range(max_steps):
        try:
            run.before_turn()
            reservation = run.reserve(2_000 + 900 * turn)
        except BudgetExceeded as refusal:  # refused before spending: the run ends here
            print(f"turn {turn}: refused: {refusal}")
            return run.finish(error=refusal).stop_reason
        action = run.record(fake_model(turn, rng), model="gpt-4o-mini", reservation=reservation)
        print(f"turn {turn}: {action.name:<9} {run.stats()}")
        if action is Action.STOP:  # this call reached a limit: say which one
            return run.finish(stop_reason=run.stop_reason).stop_reason
    return run.finish().stop_reason


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", help="a preset file written by `budgetlens presets` (YAML/TOML/JSON)")
    parser.add_argument("--task-type", default="simple_qa", help="the preset's task type (default simple_qa)")
    args = parser.parse_args(argv)
    if args.preset:
        run = RunBudget.from_preset(args.task_type, args.preset)
    else:
        run = RunBudget(max_total_tokens=20_000, max_turns=30, task_type=args.task_type)
    print(f"limits: { {k: v for k, v in run.limits.items() if v is not None} }")
    print(f"stop reason: {run_loop(run)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
