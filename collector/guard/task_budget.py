"""The provider's own budget hint (issue 21 item 5): Anthropic task budgets.

Anthropic's Messages API takes an advisory budget for a whole agentic loop, shown to the model as
a running countdown: ``output_config={"task_budget": {"type": "tokens", "total": N, "remaining":
M}}`` with the beta ``task-budgets-2026-03-13`` (Anthropic docs, "Task budgets"; public beta on the
models the docs list). It is advisory: the guard's limits still stop the run. With
``wrap_anthropic(client, run, task_budget=True)`` every guarded request carries the run's
``max_total_tokens`` as ``total`` and what is left of it (after use and open reservations) as
``remaining``; a request that sets its own ``task_budget`` keeps it. Without ``max_total_tokens``
nothing is added. The few tokens of the field itself are not estimated (a dozen at most).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ANTHROPIC_TASK_BUDGETS_BETA", "add_anthropic_task_budget", "anthropic_task_budget"]

#: The beta that opts a request into task budgets (``betas=[...]`` or the ``anthropic-beta`` header).
ANTHROPIC_TASK_BUDGETS_BETA = "task-budgets-2026-03-13"


def anthropic_task_budget(run: Any) -> dict[str, Any] | None:
    """The ``task_budget`` of ``run`` (a RunBudget) now: ``{"type": "tokens", "total": int tokens,
    "remaining": int tokens >= 0}``; None when the run has no ``max_total_tokens``."""
    stats = run.stats()
    if stats.max_tokens is None:
        return None
    remaining = stats.remaining_tokens if stats.remaining_tokens is not None else stats.max_tokens
    return {"type": "tokens", "total": int(stats.max_tokens), "remaining": int(remaining)}


def add_anthropic_task_budget(kwargs: dict[str, Any], run: Any, *, beta: bool) -> None:
    """Add ``run``'s task budget to the request ``kwargs`` (changed in place) unless it sets one:
    ``output_config.task_budget`` and the beta, in ``betas`` (``beta=True``: ``client.beta.messages``)
    or the ``anthropic-beta`` header of ``extra_headers`` (``client.messages``)."""
    config = kwargs.get("output_config")
    if isinstance(config, dict) and "task_budget" in config:
        return
    budget = anthropic_task_budget(run)
    if budget is None:
        return
    kwargs["output_config"] = {**(config if isinstance(config, dict) else {}), "task_budget": budget}
    if beta:
        betas = list(kwargs.get("betas") or ())
        if ANTHROPIC_TASK_BUDGETS_BETA not in betas:
            kwargs["betas"] = [*betas, ANTHROPIC_TASK_BUDGETS_BETA]
        return
    headers = dict(kwargs.get("extra_headers") or {})
    given = [b.strip() for b in str(headers.get("anthropic-beta", "")).split(",") if b.strip()]
    if ANTHROPIC_TASK_BUDGETS_BETA not in given:
        headers["anthropic-beta"] = ",".join([*given, ANTHROPIC_TASK_BUDGETS_BETA])
    kwargs["extra_headers"] = headers
