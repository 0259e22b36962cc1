"""A budget for the Claude Agent SDK (extra ``claude-agent-sdk``), which runs the Claude Code CLI:
the CLI makes the model calls itself, so the budget is mapped onto the CLI's own limits, its tools
are guarded from its ``PreToolUse`` hook, and usage is recorded from its result messages.

``budget = ClaudeBudget(run)``; ``async for message in budget.query(prompt=task, options=opts):``

- ``options(opts)`` (used by ``query``): a copy of ``ClaudeAgentOptions`` whose ``max_turns`` is
  at most the run's turns left and ``max_budget_usd`` at most its cost left (the CLI stops itself
  there: ``error_max_turns`` / ``error_max_budget_usd``), with a ``PreToolUse`` hook that counts
  each tool call against ``max_tool_calls`` and denies (and stops the session at) one that does
  not fit;
- ``query`` checks the run before the session starts (``before_turn``: raises BudgetExceeded
  when a limit is spent), yields the SDK's messages, and records each ``ResultMessage``: its usage
  per model (``model_usage``: input with cache reads and writes, output), priced by genai-prices;
  the CLI's own ``total_cost_usd`` and ``num_turns`` are kept in :attr:`ClaudeBudget.total_cost_usd`
  and :attr:`ClaudeBudget.num_turns`. A session that the CLI stopped at a mapped limit raises
  ``BudgetExceeded`` (``budget_turns`` / ``budget_cost``) after it is recorded; one that failed
  without a result is recorded as unknown usage.

What cannot be guarded: the CLI sends each model call itself, with no hook before it, so token
limits are checked before the session and recorded after it, not per call; a session counts as
one turn per model it used (the CLI's ``num_turns`` is kept beside it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, cast

import claude_agent_sdk as sdk

from budgetlens import semconv as sc
from budgetlens.guard.results import BudgetExceeded
from budgetlens.usage import Usage, normalize_usage

__all__ = ["ClaudeBudget", "claude_model_usage"]


def claude_model_usage(entry: Any) -> Usage:
    """One ``ResultMessage.model_usage`` entry (camelCase counts; input without cache) as a
    :class:`budgetlens.Usage` (input with cache reads and writes)."""
    read, write = int(entry.get("cacheReadInputTokens") or 0), int(entry.get("cacheCreationInputTokens") or 0)
    return Usage(
        int(entry.get("inputTokens") or 0) + read + write,
        int(entry.get("outputTokens") or 0),
        cache_read_tokens=read,
        cache_write_tokens=write,
        web_search_requests=int(entry.get("webSearchRequests") or 0),
    )


class ClaudeBudget:
    """``run`` (a ``RunBudget``) around Claude Agent SDK sessions (see the module doc)."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.total_cost_usd: float = 0.0
        self.num_turns: int = 0
        self._refused: BudgetExceeded | None = None

    def options(self, base: Any = None) -> Any:
        """``base`` (default: a new ``ClaudeAgentOptions``) with the run's turns and cost left as
        ``max_turns`` / ``max_budget_usd`` (the lower of the two when ``base`` sets one) and the
        budget's ``PreToolUse`` hook added to its hooks."""
        base = base or sdk.ClaudeAgentOptions()
        limits, stats = self.run.limits, self.run.stats()
        changes: dict[str, Any] = {}
        if limits.get("max_turns") is not None:
            left = max(0, int(limits["max_turns"]) - stats.turns)
            changes["max_turns"] = left if base.max_turns is None else min(base.max_turns, left)
        if limits.get("max_cost_usd") is not None:
            left_usd = max(0.0, float(limits["max_cost_usd"]) - (stats.cost_usd or 0.0))
            given = base.max_budget_usd
            changes["max_budget_usd"] = left_usd if given is None else min(given, left_usd)
        hooks = {k: list(v) for k, v in (base.hooks or {}).items()}
        hooks.setdefault("PreToolUse", []).insert(
            0, sdk.HookMatcher(matcher=None, hooks=[cast(Any, self._pre_tool_use)])
        )
        changes["hooks"] = hooks
        return dataclasses.replace(base, **changes)

    async def _pre_tool_use(self, input_data: Any, tool_use_id: Any, context: Any) -> dict[str, Any]:
        name = str((input_data or {}).get("tool_name") or "tool")
        try:
            self.run.before_tool_call(name)
        except BudgetExceeded as exc:
            self._refused = exc  # raised when the session ends (the result's record clears it)
            return {
                "continue_": False,
                "stopReason": str(exc),
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": str(exc),
                },
            }
        return {}

    def record(self, result: Any) -> None:
        """Record a ``ResultMessage``: usage per model (else its total usage), the CLI's cost and
        turns kept beside."""
        self.total_cost_usd += float(getattr(result, "total_cost_usd", None) or 0.0)
        self.num_turns += int(getattr(result, "num_turns", 0) or 0)
        per_model = getattr(result, "model_usage", None) or {}
        if per_model:
            for model, entry in per_model.items():
                self.run.record(claude_model_usage(entry), str(model), provider="anthropic")
            return
        usage = getattr(result, "usage", None)
        self.run.record(normalize_usage(usage, "anthropic") if usage else None, provider="anthropic")

    async def query(self, *, prompt: Any, options: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        """``claude_agent_sdk.query`` under the budget: yields its messages (see the module doc).
        Raises BudgetExceeded before the session when a limit is spent, and after it when the CLI
        stopped at a mapped limit or the hook refused a tool call."""
        self.run.before_turn()
        self._refused = None
        stop: BudgetExceeded | None = None
        recorded = False
        try:
            async for message in sdk.query(prompt=prompt, options=self.options(options), **kwargs):
                if isinstance(message, sdk.ResultMessage):
                    self.record(message)
                    recorded = True
                    stop = self._stop_of(message.subtype)
                yield message
        except BaseException as exc:
            if not recorded and not isinstance(exc, BudgetExceeded):
                self.run.record(None, provider="anthropic", error_type=type(exc).__name__)
            stop = stop or self._refused
            if stop is not None and not isinstance(exc, BudgetExceeded):
                raise stop from exc  # the CLI's error result is the budget's stop
            raise
        stop = stop or self._refused
        if stop is not None:
            raise stop

    def _stop_of(self, subtype: str) -> BudgetExceeded | None:
        """The budget stop a result's subtype means (the CLI stopped at a mapped limit)."""
        key = {"error_max_turns": "max_turns", "error_max_budget_usd": "max_cost_usd"}.get(subtype)
        if key is None:
            return None
        reason = sc.STOP_BUDGET_TURNS if key == "max_turns" else sc.STOP_BUDGET_COST
        limit = self.run.limits.get(key) or 0
        return BudgetExceeded(reason, limit, limit, detail=f"Claude Code stopped at {key}")
