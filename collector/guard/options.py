"""The guard's option checks: ``RunBudget``'s arguments other than the limits themselves.

Limit values are checked by :func:`budgetlens.limits.check_limit` (the shared contract); this
module checks thresholds, the unknown-usage policy, the model chain, models, stop reasons,
reservation estimates and alert-only limits, each raising ValueError that names the argument and
the rule.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from budgetlens import semconv as sc
from budgetlens.attribution import ATTRIBUTION_ARGS, Attribution
from budgetlens.guard.countdown import check_countdown
from budgetlens.guard.events import OnEvent, as_callbacks
from budgetlens.guard.pool import TokenPool
from budgetlens.guard.results import BudgetEvent, RunResult
from budgetlens.guard.spend import SpendTracker
from budgetlens.guard.tool_prices import ToolPrice, check_tool_prices
from budgetlens.guard.wrap_up import check_wrap_up
from budgetlens.limits import (
    LIMIT_KEYS,
    LIMIT_SPECS,
    check_fraction,
    check_limit,
    check_tokens,
    model_name_problem,
    resolve_limits,
    run_id_problem,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = [
    "UNKNOWN_USAGE_POLICIES",
    "RunOptions",
    "check_alert_limits",
    "check_model",
    "check_options",
    "check_stop_reason",
    "split_estimate",
]

#: ``block``: after a call with unknown usage no new reservation is admitted (the safe default);
#: ``residual``: the run may go on, but only within ``unknown_usage_residual_tokens`` more tokens.
UNKNOWN_USAGE_POLICIES = ("block", "residual")


def check_options(
    *,
    task_type: Any,
    warn_at: Any,
    downgrade_at: Any,
    summarize_at: Any,
    unknown_usage: Any,
    unknown_usage_residual_tokens: Any,
    model_chain: Any,
) -> tuple[str, ...]:
    """Check ``RunBudget``'s other options (as its constructor documents them); returns the model
    chain as a tuple. Raises ValueError naming the bad option and the rule."""
    for name, value in (("warn_at", warn_at), ("downgrade_at", downgrade_at), ("summarize_at", summarize_at)):
        check_fraction(name, value)
    if unknown_usage not in UNKNOWN_USAGE_POLICIES:
        raise ValueError(f"unknown_usage must be one of {UNKNOWN_USAGE_POLICIES}, got {unknown_usage!r}")
    if not isinstance(task_type, str) or not task_type:
        raise ValueError(f"task_type must be a non-empty string, got {task_type!r}")
    check_limit("unknown_usage_residual_tokens", unknown_usage_residual_tokens)
    chain = None
    if isinstance(model_chain, Iterable) and not isinstance(model_chain, (str, bytes)):
        chain = tuple(model_chain)
    if chain is None or not all(isinstance(m, str) and m for m in chain):
        raise ValueError(
            f"model_chain must be an iterable of model names (non-empty strings), got {model_chain!r}"
        )
    return chain


def check_model(model: Any) -> None:
    """Check a model argument: a model name (str) or None. Raises ValueError naming the rule."""
    if model.__class__ is str and model in _GOOD_MODELS:
        return  # checked before (a run calls a few models many times)
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a model name (str) or None, got {model!r}")
    problem = None if model is None else model_name_problem(model)
    if problem is not None:  # the collector's rule: it would reject the call span
        raise ValueError(f"model must be a model name {problem}")
    if model is not None and len(_GOOD_MODELS) < 1024:
        _GOOD_MODELS.add(model)


#: Model names :func:`check_model` accepted (plain str only; bounded).
_GOOD_MODELS: set[str] = set()


def check_stop_reason(stop_reason: str | None) -> None:
    """Check a stop reason given by the caller: None or one of :data:`budgetlens.semconv.STOP_REASONS`.
    Raises ValueError naming the allowed reasons."""
    if stop_reason is not None and stop_reason not in sc.STOP_REASONS:
        raise ValueError(f"stop_reason must be one of {sc.STOP_REASONS}, got {stop_reason!r}")


def split_estimate(estimated_tokens: Any, input_tokens: Any, output_tokens: Any) -> int | None:
    """Check a reservation's estimate and its optional split; returns the output part (tokens),
    or None when the estimate is not split (it then counts as input, like an unknown-usage charge).

    Every value is an int >= 0 of at most ``budgetlens.limits.MAX_TOKENS``; given one part, the other is the rest of ``estimated_tokens``;
    given both, they must add up to it. Raises ValueError naming the argument and the rule.
    """
    for name, value in (
        ("estimated_tokens", estimated_tokens),
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
    ):
        if value is None and name != "estimated_tokens":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        check_tokens(value, name)
    if input_tokens is None and output_tokens is None:
        return None
    output = output_tokens if output_tokens is not None else estimated_tokens - input_tokens
    inp = input_tokens if input_tokens is not None else estimated_tokens - output_tokens
    if output < 0 or inp < 0 or inp + output != estimated_tokens:
        raise ValueError(
            f"input_tokens + output_tokens must equal estimated_tokens ({estimated_tokens}), got "
            f"input_tokens={input_tokens!r}, output_tokens={output_tokens!r}"
        )
    return output


def check_alert_limits(alert_limits: Any) -> dict[str, float]:
    """Check alert-only limits: a mapping of :data:`LIMIT_KEYS` names to values as
    :func:`check_limit` (None entries dropped). Returns them as a dict. Raises ValueError naming
    the bad key or value."""
    if alert_limits is None:
        return {}
    if not isinstance(alert_limits, Mapping):
        raise ValueError(f"alert_limits must be a mapping of limit name -> value, got {alert_limits!r}")
    for name, value in alert_limits.items():
        if name not in LIMIT_SPECS:
            raise ValueError(f"alert_limits: unknown limit {name!r}; expected one of {LIMIT_KEYS}")
        check_limit(name, value, label=f"alert_limits[{name!r}]")
    return {k: v for k, v in alert_limits.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """``RunBudget``'s constructor arguments, checked (the limits: see :class:`budgetlens.RunBudget`).

    Thresholds are fractions of the most-used token or cost limit: ``warn_at`` (0.8, one
    ``WARN``), ``downgrade_at`` (0.6, one ``DOWNGRADE`` to the next model of ``model_chain``),
    ``summarize_at`` (0.85, ``SUMMARIZE`` while above); at 1.0 ``STOP``. Each is also a span event
    and an ``on_event`` callback (a callable or an iterable of callables taking a
    :class:`budgetlens.guard.results.BudgetEvent`).

    ``unknown_usage``: policy after a call that ended without usage (see
    :data:`UNKNOWN_USAGE_POLICIES`, default ``block``); ``unknown_usage_residual_tokens`` (default
    10 % of ``max_total_tokens``) bounds the ``residual`` policy. ``clock``: a monotonic clock in
    seconds (injectable for tests). ``tracer``: an OTel tracer (default
    ``opentelemetry.trace.get_tracer("budgetlens")``). ``spend``: an optional
    :class:`budgetlens.guard.spend.SpendTracker` shared by runs of this process. ``pool``: an
    optional :class:`budgetlens.guard.pool.TokenPool` (tokens shared by runs: each reservation
    draws from it too). ``alert_limits``: alert-only limits by constructor name (e.g.
    ``{"max_total_tokens": 2_000_000}`` for a research agent): reaching one emits one
    ``budgetlens.alert`` event and a WARNING log, and never stops the run. ``retry_policy``: a
    callable taking the default :class:`budgetlens.guard.results.RunResult` and returning ``retryable`` (see
    :meth:`budgetlens.RunBudget.finish`). ``provider``: the
    default ``gen_ai.provider.name``. ``model_chain``: model names (strings), best first.
    ``tool_prices``: the paid tools' price table, tool name -> :class:`budgetlens.guard.tool_prices.ToolPrice`
    (given as a mapping or a tool price file's path; see :mod:`budgetlens.guard.tool_prices`).
    ``wrap_up_tokens`` (tokens) / ``wrap_up_usd`` (USD): the wrap-up slice kept for one final call
    (see :mod:`budgetlens.guard.wrap_up`), below ``max_total_tokens`` / ``max_cost_usd``.
    ``countdown_at``: fractions in (0, 1] at which the model is shown a one-line budget notice
    (opt-in, default none; see :mod:`budgetlens.guard.countdown`).

    ``limits``: every :data:`budgetlens.limits.LIMIT_KEYS` name (None: no limit), as
    :func:`budgetlens.limits.resolve_limits`; ``attribution``: who the run belongs to
    (:class:`budgetlens.attribution.Attribution`, from ``service``, ``team``/``tenant``, ``user``,
    ``session_id`` and ``tags``); ``model_chain``: a tuple of model names;
    ``callbacks``: ``on_event`` as a tuple of callables; ``alert_limits``: the alert-only limits
    set (None entries dropped). Build it with :meth:`build`, which raises ValueError naming a bad
    argument and the rule.
    """

    limits: Mapping[str, float | None]
    task_type: str = "default"
    run_id: str | None = None
    agent_name: str | None = None
    provider: str | None = None
    warn_at: float = 0.8
    model_chain: tuple[str, ...] = ()
    downgrade_at: float = 0.6
    summarize_at: float = 0.85
    callbacks: tuple[Callable[[BudgetEvent], Any], ...] = ()
    unknown_usage: str = "block"
    unknown_usage_residual_tokens: int | None = None
    clock: Callable[[], float] = time.monotonic
    tracer: Tracer | None = None
    spend: SpendTracker | None = None
    pool: TokenPool | None = None
    alert_limits: Mapping[str, float] = dataclasses.field(default_factory=dict)
    retry_policy: Callable[[RunResult], bool] | None = None
    tool_prices: Mapping[str, ToolPrice] = dataclasses.field(default_factory=dict)
    wrap_up_tokens: int | None = None
    wrap_up_usd: float | None = None
    countdown_at: tuple[float, ...] = ()
    attribution: Attribution = dataclasses.field(default_factory=Attribution)

    def scoped(self) -> tuple[TokenPool | None, SpendTracker | None]:
        """(pool, spend) that apply to this run: a pool or tracker with a ``scope`` that this
        run's attribution does not match is left out (it budgets other runs)."""
        pool, spend = self.pool, self.spend
        if pool is not None and not self.attribution.matches(pool.scope):
            pool = None
        if spend is not None and not self.attribution.matches(spend.scope):
            spend = None
        return pool, spend

    @classmethod
    def build(
        cls,
        limits: Mapping[str, float | None],
        *,
        model_chain: Iterable[str] = (),
        on_event: OnEvent = None,
        alert_limits: Mapping[str, float | None] | None = None,
        tool_prices: Any = None,
        **options: Any,
    ) -> RunOptions:
        """Check ``limits`` (constructor names), the options and ``on_event``, ``alert_limits``,
        ``pool``, ``retry_policy``, ``tool_prices`` and the attribution (``service``,
        ``team``/``tenant``, ``user``, ``session_id``, ``tags``: ``ATTRIBUTION_ARGS``, checked by
        :meth:`budgetlens.attribution.Attribution.build`), in that order. ``options``: the other
        fields by name. Raises ValueError naming the first bad argument and the rule."""
        who = {name: options.pop(name, None) for name in ATTRIBUTION_ARGS}
        resolved = resolve_limits(limits, default=not alert_limits)
        defaults = {
            f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
        }
        given = {**defaults, **options}
        chain = check_options(
            task_type=given["task_type"],
            warn_at=given["warn_at"],
            downgrade_at=given["downgrade_at"],
            summarize_at=given["summarize_at"],
            unknown_usage=given["unknown_usage"],
            unknown_usage_residual_tokens=given["unknown_usage_residual_tokens"],
            model_chain=model_chain,
        )
        run_id = given["run_id"]
        if run_id is not None and (problem := run_id_problem(run_id)):
            raise ValueError(f"run_id must be {problem} or None, got {str(run_id)[:40]!r}")
        callbacks = as_callbacks(on_event)
        alerts = check_alert_limits(alert_limits)
        pool, retry_policy = given["pool"], given["retry_policy"]
        if pool is not None and not isinstance(pool, TokenPool):
            raise ValueError(f"pool must be a TokenPool or None, got {pool!r}")
        if retry_policy is not None and not callable(retry_policy):
            raise ValueError(
                f"retry_policy must be a callable taking a RunResult, or None; got {retry_policy!r}"
            )
        prices = check_tool_prices(tool_prices)
        check_wrap_up(resolved, given["wrap_up_tokens"], given["wrap_up_usd"])
        options["countdown_at"] = check_countdown(given["countdown_at"])
        attribution = Attribution.build(**who)
        return cls(
            resolved,
            model_chain=chain,
            callbacks=callbacks,
            alert_limits=alerts,
            attribution=attribution,
            tool_prices=prices,
            **options,
        )
