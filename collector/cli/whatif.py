"""``budgetlens whatif``: replay a candidate budget over the stored history, call by call."""

from __future__ import annotations

import argparse

from budgetlens.analysis.defaults import DEFAULT_MULTIPLIER
from budgetlens.cli._analysis import (
    WINDOW_HELP,
    add_format_argument,
    add_window_arguments,
    analysis_session,
    write_frame,
)
from budgetlens.cli._common import positive_float

#: What the command prints (``--view``).
VIEWS = ("summary", "runs", "curve", "target")


def _limit(text: str) -> tuple[str, float]:
    """``KEY=VALUE`` of ``--limit``: a guard limit key and a number."""
    from budgetlens.limits import LIMIT_KEYS, check_limit

    key, sep, value = text.partition("=")
    if not sep or key not in LIMIT_KEYS:
        raise argparse.ArgumentTypeError(
            f"must be KEY=VALUE with KEY one of {', '.join(LIMIT_KEYS)}, got {text!r}"
        )
    try:
        number = float(value)
        if key not in ("max_duration_s", "max_cost_usd") and number.is_integer():
            number = int(number)
        check_limit(key, number)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return key, number


def _rate(text: str) -> float:
    """A hit rate: ``0.05`` or ``5%``, in [0, 1]."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a rate in [0, 1] or a percentage, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a rate in [0, 1] or a percentage, got {text!r}")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "whatif",
        help="replay a candidate budget over the history: stops, hit rate, savings",
        description=(
            "Replay a candidate budget over the stored runs, call by call in time order: which "
            "runs it would have stopped (first limit crossed: time, turns, tool calls, cost, "
            "tokens), at which call and why, the projected hit rate and the tokens and USD the "
            "stopped runs would not have spent. The budget is P95 x --multiplier per task type "
            f"(default {DEFAULT_MULTIPLIER:g}), explicit --limit KEY=VALUE for every task type, or a --preset file. "
            "Runs the old budget stopped count as stopped when the new limit is not larger, and "
            "as censored (outcome unknown) when it is. Views: summary (per task type), runs "
            "(the stopped and censored runs), curve (multiplier 1.0-3.0: projected hit rate vs "
            "spend avoided), target (the smallest multiplier meeting --target and its limits). " + WINDOW_HELP
        ),
        epilog=(
            "Examples: budgetlens whatif --multiplier 2; budgetlens whatif --limit "
            "max_total_tokens=50000 --view runs; budgetlens whatif --view target --target 5%"
        ),
    )
    add_window_arguments(parser)
    add_format_argument(parser)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--multiplier",
        type=positive_float,
        help=f"budget = P95 x this per task type (default: {DEFAULT_MULTIPLIER:g})",
    )
    budget.add_argument(
        "--limit",
        type=_limit,
        action="append",
        metavar="KEY=VALUE",
        help="an explicit limit for every task type, e.g. max_total_tokens=50000 (repeatable)",
    )
    budget.add_argument("--preset", metavar="FILE", help="the limits of a preset file (YAML/TOML/JSON)")
    parser.add_argument(
        "--method",
        choices=("auto", "plain", "kaplan-meier"),
        default="auto",
        help="the P95 under --multiplier, the curve and the target: auto (default) uses the "
        "Kaplan-Meier P95 where more than 5%% of a task type's runs were stopped by a budget",
    )
    parser.add_argument("--view", choices=VIEWS, default="summary", help="what to print (default: summary)")
    parser.add_argument(
        "--target",
        type=_rate,
        default=None,
        help="the target hit rate of --view target, 0..1 or a percentage (default: 5%%)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from budgetlens.analysis import whatif

    target = whatif.DEFAULT_TARGET_HIT_RATE if args.target is None else args.target
    with analysis_session(args) as (conn, filters):
        if args.view in ("curve", "target"):
            if args.limit or args.preset:
                raise ValueError(f"--view {args.view} varies the multiplier; drop --limit/--preset")
            ev = whatif.evidence(conn, filters)
            curve = whatif.tradeoff(conn, filters, ev, method=args.method)
            if args.view == "curve":
                frame = curve
            else:
                frame = _target_columns(whatif.target_presets(ev, curve, target, method=args.method))
        else:
            if args.limit:
                budget = whatif.Budget.uniform(**dict(args.limit))
            elif args.preset:
                budget = whatif.Budget.from_preset_file(args.preset)
            else:
                ev = whatif.evidence(conn, filters)
                multiplier = args.multiplier or DEFAULT_MULTIPLIER
                budget = whatif.Budget.from_presets(whatif.evidence_presets(ev, multiplier, args.method))
            result = whatif.replay(conn, filters, budget)
            frame = result.summary if args.view == "summary" else result.runs
    write_frame(frame, args.format, float_format="{:.3g}")
    return 0


def _target_columns(frame):
    """The target view's columns in reading order: the choice first, then the limits, then the
    evidence; ``lower_bound_keys`` as one space-separated cell."""
    from budgetlens.limits import LIMIT_KEYS

    out = frame.copy()
    from budgetlens.analysis.values import format_rate_range

    out["lower_bound_keys"] = [" ".join(keys) for keys in out["lower_bound_keys"]]
    out["projected_hit_rate_range"] = [
        format_rate_range(lo, hi)
        for lo, hi in zip(out["projected_hit_rate"], out["projected_hit_rate_upper"])
    ]
    first = [
        "task_type",
        "multiplier",
        "verdict",
        "met",
        "projected_hit_rate_range",
        "projected_hit_rate",
        "projected_hit_rate_upper",
        "avoided_tokens",
        "avoided_cost_usd",
        *LIMIT_KEYS,
        "method",
        "censored_share",
        "lower_bound_keys",
    ]
    return out[first + [c for c in out.columns if c not in first]]
