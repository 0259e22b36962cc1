"""A hard budget for agents built on the OpenAI Agents SDK (extra ``agents``), through its
run-hooks interface.

``Runner.run(agent, task, hooks=BudgetRunHooks(run))``: before each model call
(``on_llm_start``) the hooks reserve the prompt estimate (system prompt and input items) plus
the agent's ``model_settings.max_tokens`` (else the budget's output left, at most
``max_output_tokens``), raising ``BudgetExceeded`` before the call when it does not fit; after
it (``on_llm_end``) they record the response's usage; each local tool call counts against
``max_tool_calls`` (``on_tool_start``). The ``BudgetExceeded`` propagates out of
``Runner.run``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from agents import RunHooks

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.usage import Usage

__all__ = ["BudgetRunHooks", "agents_usage"]


def agents_usage(usage: Any) -> Usage | None:
    """An Agents SDK ``Usage`` of one model response as a :class:`budgetlens.Usage` (tokens;
    cached input and reasoning output as parts); None when it reports no request."""
    if usage is None or not getattr(usage, "requests", 1):
        return None
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0) or 0
    reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0
    return Usage(
        usage.input_tokens, usage.output_tokens, cache_read_tokens=cached, reasoning_tokens=reasoning
    )


def _model_name(agent: Any) -> str | None:
    model = getattr(agent, "model", None)
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    if isinstance(name, str):
        return name
    try:
        from agents.models import get_default_model

        return get_default_model()
    except Exception:
        return None


class BudgetRunHooks(RunHooks):
    """Run hooks that put ``run`` (a ``RunBudget``) around every model and tool call of an
    Agents SDK run. ``count_tokens(system_prompt, input_items) -> int`` replaces the prompt
    estimate; ``max_output_tokens`` is reserved for agents whose settings set no ``max_tokens``;
    ``provider`` names the ``gen_ai.provider.name``. ``effect_tools``: names of tools that
    write somewhere (each begins an external effect, confirmed when the tool returns)."""

    def __init__(
        self,
        run: Any,
        *,
        count_tokens: Callable[[str | None, list], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str = "openai",
        effect_tools: tuple[str, ...] = (),
    ) -> None:
        self.run, self.provider = run, provider
        self._count, self._ceiling = count_tokens, max_output_tokens
        self._effect_tools = frozenset(effect_tools)
        self._open: dict[int, deque] = {}
        self._effects: dict[int, deque] = {}

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list
    ) -> None:
        if self._count is not None:
            prompt = self._count(system_prompt, input_items)
        else:
            tools = [
                getattr(t, "params_json_schema", None) or getattr(t, "name", "") for t in agent.tools or ()
            ]
            prompt = estimate_tokens(system_prompt, list(input_items), tools)
        settings = getattr(agent, "model_settings", None)
        cap = getattr(settings, "max_tokens", None)
        if not isinstance(cap, int):
            left = self.run.output_budget(self._ceiling, prompt)
            cap = self._ceiling if left is None or left < 1 else left
        res = self.run.reserve(prompt + cap, _model_name(agent), output_tokens=cap)
        self._open.setdefault(id(agent), deque()).append(res)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        queue = self._open.get(id(agent))
        res = queue.popleft() if queue else None
        self.run.record(
            agents_usage(getattr(response, "usage", None)),
            res.model if res is not None else _model_name(agent),
            reservation=res,
            provider=self.provider,
        )

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        name = str(getattr(tool, "name", type(tool).__name__))
        effect = self.run.before_tool_call(name, external_effect=name in self._effect_tools)
        if effect is not None:
            self._effects.setdefault(id(agent), deque()).append(effect)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        name = str(getattr(tool, "name", type(tool).__name__))
        queue = self._effects.get(id(agent))
        if name in self._effect_tools and queue:
            self.run.confirm_effect(queue.popleft())
