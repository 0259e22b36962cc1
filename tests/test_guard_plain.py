"""The plain path of reserve and record (``budgetlens.guard.plain``, issue 25) gives what the general
path gives: the same returns, refusals, events, span attributes, stats and result, on random runs
through the real OpenTelemetry SDK; and its one-pass reservation check equals the two checks it
replaces."""

from __future__ import annotations

import random

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetlens import BudgetExceeded, RunBudget, Usage
from budgetlens import config as cfg
from budgetlens.guard import plain
from budgetlens.guard import stops as lim
from budgetlens.guard.ledger import RunLedger
from budgetlens.guard.results import Reservation
from budgetlens.price_file import configured_file

MODELS = ("gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5", "acme-llm-7", None)


def _usage(rng: random.Random) -> Usage:
    inp, out = rng.randrange(0, 40_000), rng.randrange(0, 4_000)
    return Usage(
        inp,
        out,
        cache_read_tokens=rng.randrange(0, inp + 1) if rng.random() < 0.5 else 0,
        cache_write_tokens=rng.randrange(0, 500) if rng.random() < 0.1 and inp >= 500 else 0,
        reasoning_tokens=rng.randrange(0, out + 1) if rng.random() < 0.3 else 0,
    )


def _limits(rng: random.Random) -> dict:
    pick = {
        "max_total_tokens": rng.choice([None, 50_000, 200_000, 10**9]),
        "max_input_tokens": rng.choice([None, None, 120_000]),
        "max_output_tokens": rng.choice([None, None, 9_000]),
        "max_turns": rng.choice([None, None, 6, 12]),
        "max_cost_usd": rng.choice([None, None, 0.05, 0.5, 10.0**9]),
        "max_duration_s": rng.choice([None, None, 30.0]),
    }
    if all(value is None for value in pick.values()):
        pick["max_total_tokens"] = 100_000
    return pick


def _steps(rng: random.Random, count: int) -> list[tuple]:
    """A random run: (step, arguments) pairs the two runs replay alike."""
    out: list[tuple] = []
    for _ in range(count):
        kind = rng.choices(
            ["call", "call_no_res", "release", "turn", "tool", "set_max"], [12, 2, 1, 2, 1, 1]
        )[0]
        if kind == "call":
            split = rng.random() < 0.3
            out.append(
                (
                    "call",
                    rng.randrange(0, 30_000),
                    rng.randrange(0, 2_000) if split else None,
                    rng.choice(MODELS) if rng.random() < 0.2 else None,
                    rng.choice(MODELS),
                    None if rng.random() < 0.05 else _usage(rng),
                    rng.choice([None, None, "gpt-4o-2024-08-06"]),
                )
            )
        elif kind == "call_no_res":
            out.append(("call_no_res", rng.choice(MODELS), _usage(rng)))
        elif kind == "release":
            out.append(("release", rng.randrange(0, 5_000)))
        elif kind == "set_max":
            out.append(
                ("set_max", rng.choice(["max_total_tokens", "max_cost_usd", "max_turns"]), rng.random())
            )
        else:
            out.append((kind,))
    return out


def _exc(error: BaseException) -> tuple:
    if isinstance(error, BudgetExceeded):
        return ("BudgetExceeded", error.reason, error.limit, error.used, error.requested, error.detail)
    return (type(error).__name__, str(error))


def _replay(steps: list[tuple], limits: dict, options: dict, enabled: bool, monkeypatch) -> dict:
    """Run ``steps`` on a fresh guard with the plain path ``enabled`` or not; everything observable."""
    with monkeypatch.context() as patch:
        return _replay_patched(steps, limits, options, enabled, patch)


def _replay_patched(steps: list[tuple], limits: dict, options: dict, enabled: bool, monkeypatch) -> dict:
    monkeypatch.setattr(plain, "ENABLED", enabled)
    taken = {"reserve": 0, "record": 0}
    for name in taken:
        original = getattr(plain, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            taken[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(plain, name, spy)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    now = [0.0]
    events: list = []
    run = RunBudget(
        **limits,
        **options,
        run_id="r" * 32,
        tracer=provider.get_tracer("test"),
        clock=lambda: now[0],
        on_event=events.append,
    )
    seen: list = []
    with_usage = 0  # calls recorded with a Usage
    for step in steps:
        now[0] += 1.0
        try:
            if step[0] == "call":
                _, tokens, output, reserve_model, model, usage, response_model = step
                res = run.reserve(tokens, reserve_model, output_tokens=output)
                seen.append(("reserved", res._replace(start_ns=0)))
                seen.append(
                    ("action", run.record(usage, model, reservation=res, response_model=response_model))
                )
                with_usage += usage is not None
            elif step[0] == "call_no_res":
                seen.append(("action", run.record(step[2], step[1])))
                with_usage += 1
            elif step[0] == "release":
                run.release(run.reserve(step[1]))
            elif step[0] == "turn":
                seen.append(("turn", run.before_turn()))
            elif step[0] == "tool":
                run.before_tool_call("search")
            else:
                _, name, share = step
                current = run.limits[name]
                run.set_max(**{name: None if current is None else type(current)(current * (0.5 + share))})
        except (BudgetExceeded, ValueError) as error:
            seen.append(("raised", _exc(error)))
        seen.append(("actions", run.last_actions))
        seen.append(("stats", run.stats()))
    result = run.finish()
    provider.shutdown()
    spans = [
        (
            span.name,
            dict(span.attributes or {}),
            [(e.name, dict(e.attributes or {})) for e in span.events],
            span.status.status_code,
        )
        for span in exporter.get_finished_spans()
    ]
    return {
        "seen": seen,
        "events": events,
        "spans": spans,
        "result": result,
        "taken": taken,
        "with_usage": with_usage,
    }


@pytest.mark.parametrize("seed", range(40))
def test_the_plain_path_gives_what_the_general_path_gives_on_random_runs(seed, monkeypatch):
    rng = random.Random(seed)
    limits = _limits(rng)
    options = {"provider": rng.choice(["openai", None]), "unknown_usage": rng.choice(["block", "residual"])}
    if rng.random() < 0.3:
        options.update(warn_at=0.3, downgrade_at=0.5, summarize_at=0.7, model_chain=("gpt-4o", "gpt-4o-mini"))
    steps = _steps(rng, rng.randrange(10, 40))
    general = _replay(steps, limits, options, False, monkeypatch)
    lean = _replay(steps, limits, options, True, monkeypatch)
    assert general["taken"] == {"reserve": 0, "record": 0}
    for key in ("seen", "events", "spans", "result"):
        assert lean[key] == general[key], key
    assert lean["taken"]["record"] == lean["with_usage"]  # every call recorded with a Usage went plain


def test_random_runs_take_the_plain_path_for_most_steps(monkeypatch):
    rng = random.Random(7)
    steps = [s for s in _steps(rng, 200) if s[0] == "call" and s[5] is not None and s[3] != "acme-llm-7"]
    lean = _replay(steps, {"max_total_tokens": 10**9, "max_cost_usd": 10.0**9}, {}, True, monkeypatch)
    assert lean["taken"]["reserve"] == len(steps) and lean["taken"]["record"] == len(steps)


def test_a_run_with_a_wrap_up_slice_or_alert_limits_takes_the_general_path(monkeypatch):
    for options in ({"wrap_up_tokens": 1_000}, {"alert_limits": {"max_turns": 3}}):
        out = _replay(
            [("call", 100, None, None, "gpt-4o", Usage(10, 10), None)], {}, options, True, monkeypatch
        )
        assert out["taken"] == {"reserve": 0, "record": 0}


def _ledger(rng: random.Random) -> RunLedger:
    use = RunLedger()
    use.input_tokens, use.output_tokens = rng.randrange(0, 100_000), rng.randrange(0, 20_000)
    use.unknown_tokens = rng.choice([0, 0, rng.randrange(0, 8_000)])
    use.cost_usd, use.reserved_cost_usd = rng.uniform(0, 2), rng.choice([0.0, rng.uniform(0, 1)])
    use.tool_cost_usd = rng.choice([0.0, rng.uniform(0, 0.5)])
    for number in range(rng.randrange(0, 3)):
        tokens = rng.randrange(0, 20_000)
        use.reserve(Reservation(number, tokens, number, None, 0, rng.randrange(0, tokens + 1), 0.0, "r"))
    return use


def test_the_one_pass_reservation_check_equals_spent_then_reserve_stop():
    rng = random.Random(25)
    stopped = 0
    for _ in range(5_000):
        use = _ledger(rng)
        limits = {
            "max_total_tokens": rng.choice([None, rng.randrange(0, 200_000)]),
            "max_input_tokens": rng.choice([None, rng.randrange(0, 150_000)]),
            "max_output_tokens": rng.choice([None, rng.randrange(0, 30_000)]),
            "max_cost_usd": rng.choice([None, rng.uniform(0, 4)]),
            "max_turns": None,
            "max_duration_s": None,
        }
        tokens = rng.randrange(0, 40_000)
        output, cost = rng.randrange(0, tokens + 1), rng.choice([0.0, rng.uniform(0, 1)])
        expected = lim.spent_stop(limits, use) or lim.reserve_stop(limits, use, tokens, output, cost)
        assert plain.admit_stop(limits, use, tokens, output, cost) == expected
        stopped += expected is not None
    assert 1_000 < stopped < 4_900  # both outcomes, many times


def test_the_environment_read_equals_os_environ_get(monkeypatch):
    import os

    name = "BUDGETLENS_TEST_PLAIN_VARIABLE"
    monkeypatch.delenv(name, raising=False)
    assert cfg.environ_get(name) is None is os.environ.get(name)
    for value in ("", "prices.yaml", "päth/ü.yaml"):
        monkeypatch.setenv(name, value)
        assert cfg.environ_get(name) == os.environ.get(name) == value
    monkeypatch.setattr(os, "environ", {name: "replaced.yaml"})  # a plain mapping in its place
    assert cfg.environ_get(name) == "replaced.yaml"


def test_the_configured_price_file_is_the_argument_then_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(cfg.ENV_PRICES_FILE, raising=False)
    assert configured_file(None) is None
    monkeypatch.setenv(cfg.ENV_PRICES_FILE, "")
    assert configured_file(None) is None  # empty counts as unset
    monkeypatch.setenv(cfg.ENV_PRICES_FILE, "from-env.yaml")
    assert configured_file(None) == "from-env.yaml"
    assert configured_file(tmp_path / "given.yaml") == str(tmp_path / "given.yaml")
