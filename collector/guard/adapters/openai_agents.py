"""A hard budget for agents built on the OpenAI Agents SDK (extra ``agents``), through its
run-hooks interface.

``hooks = BudgetRunHooks(run)``; ``Runner.run(agent, task, hooks=hooks, run_config=hooks.run_config())``:

- before each model call (``on_llm_start``) the hooks reserve the prompt estimate (system prompt
  and input items) plus the agent's ``model_settings.max_tokens`` (else the budget's output left,
  at most ``max_output_tokens``), raising ``BudgetExceeded`` before the call when it does not
  fit; after it (``on_llm_end``) they record the response's usage. A response that reports no
  tokens (a Chat Completions stream the server sent without usage) is *unknown*, charged its
  reservation, never 0. ``run_config()`` asks Chat Completions streams for their usage
  (``ModelSettings(include_usage=True)``; the SDK asks only OpenAI's own endpoint by default).
- a model call that raised (a 429 after the SDK's retries, a cut stream) gets no end hook: its
  reservation stays open and is charged as unknown usage when the run finishes (or when the same
  agent of the same run starts its next call).
- each local tool call and each handoff counts against ``max_tool_calls`` (``on_tool_start``,
  ``on_handoff``); several tool calls of one response are each counted before any runs.
- sub-agents of ``agent.as_tool()`` run in a nested ``Runner`` without these hooks: the hooks
  attach themselves to the sub-agent (its ``agent.hooks``, keeping hooks it had) when its tool
  starts, so its model and tool calls are charged to the same run. A sub-agent's refusal that
  ``as_tool`` turns into a tool error message for the model is raised again at the run's next
  step, so the run stops there.
- a refusal is raised as :class:`AgentsBudgetExceeded`, a ``BudgetExceeded`` that is also the
  SDK's own ``AgentsException``, so the SDK lets it out of ``Runner.run`` as it is (not wrapped in
  a ``UserError``).
- with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), the call that does not fit next to it
  becomes the run's final call (see :mod:`budgetlens.guard.adapters._wrap_up`): the hooks reserve
  it with ``final=True`` and the agent's model (wrapped at ``on_agent_start``; a model named by a
  string through ``run_config()``'s provider) sends it without tools or handoffs, with the
  instruction to answer now as a last user item and ``max_tokens`` capped to the slice (an output
  type is kept); the answer is the run result's ``final_output`` and the run then stops with
  ``budget_wrap_up``. An ``as_tool`` sub-agent's model is not wrapped: a call of it that does not
  fit the ordinary room is refused (a ``budget_*`` stop, as without a slice).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from typing import Any

from agents import AgentHooks, RunConfig, RunHooks
from agents.exceptions import AgentsException
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelProvider

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION, reserve_final
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.guard.results import BudgetExceeded
from budgetlens.usage import Usage

__all__ = ["AgentsBudgetExceeded", "BudgetRunHooks", "agents_usage"]


class AgentsBudgetExceeded(BudgetExceeded, AgentsException):
    """A :class:`BudgetExceeded` the Agents SDK re-raises unchanged (it wraps other exceptions
    from tools and hooks in ``UserError``). Same ``reason``/``limit``/``used``/``requested``."""


def _raise_as_agents(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except AgentsBudgetExceeded:
        raise
    except BudgetExceeded as exc:
        raise AgentsBudgetExceeded(exc.reason, exc.limit, exc.used, exc.requested, exc.detail) from None


def agents_usage(usage: Any) -> Usage | None:
    """An Agents SDK ``Usage`` of one model response as a :class:`budgetlens.Usage` (tokens;
    cached input and reasoning output as parts); None when it reports no request or no tokens
    (no call has an empty prompt: 0/0 is a response without usage, unknown, never 0)."""
    if usage is None or not getattr(usage, "requests", 1):
        return None
    if not (usage.input_tokens or usage.output_tokens):
        return None
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0) or 0
    reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        cache_read_tokens=min(cached, usage.input_tokens),
        reasoning_tokens=min(reasoning, usage.output_tokens),
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
    Agents SDK run, its handoffs and its ``as_tool`` sub-agents. ``count_tokens(system_prompt,
    input_items) -> int`` replaces the prompt estimate; ``max_output_tokens`` is reserved for
    agents whose settings set no ``max_tokens``; ``provider`` names the
    ``gen_ai.provider.name``. ``effect_tools``: names of tools that write somewhere (each begins
    an external effect, confirmed when the tool returns)."""

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
        self._open: dict[tuple[int, int], deque] = {}
        self._effects: dict[int, deque] = {}
        self._pending_stop: BudgetExceeded | None = None  # a sub-agent's refusal the SDK swallowed
        self._final_input: Any = None  # the input list of the final call under way (see _FINAL)

    def _stop_pending(self) -> None:
        """Raise the refusal of a sub-agent that ``as_tool`` turned into a tool error message for
        the model (its default ``failure_error_function``): the run stops at its next step."""
        stop, self._pending_stop = self._pending_stop, None
        if stop is not None:
            raise AgentsBudgetExceeded(stop.reason, stop.limit, stop.used, stop.requested, stop.detail)

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (default: a new ``RunConfig``) asking Chat Completions streams for usage
        (``include_usage=True`` unless ``base`` sets it); nested ``as_tool`` runs inherit it."""
        base = base or RunConfig()
        settings = base.model_settings or ModelSettings()
        if settings.include_usage is None:
            settings = dataclasses.replace(settings, include_usage=True)
        model = _final_call_model(base.model) if isinstance(base.model, Model) else base.model
        provider = _FinalCallProvider(base.model_provider)
        return dataclasses.replace(base, model_settings=settings, model=model, model_provider=provider)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if isinstance(getattr(agent, "model", None), Model):
            agent.model = _final_call_model(agent.model)  # it rewrites final calls only

    def _end_final(self) -> None:
        if self._final_input is not None:
            _FINAL.pop(id(self._final_input), None)
            self._final_input = None

    def _own(self, agent: Any) -> bool:
        """Whether the run hooks handle ``agent`` (not when the agent's own hooks, attached by
        these for a sub-agent, do: each call is charged once)."""
        hooks = getattr(agent, "hooks", None)
        return not (isinstance(hooks, _SubAgentHooks) and hooks.owner is self)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list
    ) -> None:
        if self._own(agent):
            self.llm_start(context, agent, system_prompt, input_items)

    def llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list, final: bool = True
    ) -> None:
        """Reserve one model call of ``agent`` (see the module doc); ``final``: the call may be the
        run's final call (not a sub-agent's, whose model is not wrapped)."""
        self._stop_pending()
        self._end_final()
        key = (id(context), id(agent))
        stale = self._open.get(key)
        while stale:  # the same agent of the same run calls again: the last call raised
            self.run.record(None, reservation=stale.popleft(), provider=self.provider)
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
        model = _model_name(agent)
        if final and self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            res = _raise_as_agents(lambda: self._reserve_final(system_prompt, input_items, model, settings))
            self._final_input = input_items
            _FINAL[id(input_items)] = (input_items, res.output_tokens)
        else:
            res = _raise_as_agents(lambda: self.run.reserve(prompt + cap, model, output_tokens=cap))
        self._open.setdefault(key, deque()).append(res)

    def _reserve_final(self, system_prompt: str | None, input_items: list, model: Any, settings: Any) -> Any:
        """Reserve the run's final call with the shared step (:func:`reserve_final`): the prompt
        with the instruction and without tools, the output capped to the slice."""
        count, items = self._count, [*input_items, _instruction_item()]
        guard = CallGuard(
            self.run,
            self.provider,
            (lambda _kw: count(system_prompt, items)) if count is not None else None,
            self._ceiling,
            count_tool_calls=False,
        )
        given = getattr(settings, "max_tokens", None)
        kwargs = {"messages": list(input_items), "model": model, "max_tokens": given}
        return reserve_final(guard, kwargs, (system_prompt, list(input_items)), ("max_tokens",), "max_tokens")

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self._own(agent):
            self.llm_end(context, agent, response)

    def llm_end(self, context: Any, agent: Any, response: Any) -> None:
        """Record the model call of ``agent`` that ended with ``response``."""
        self._end_final()
        queue = self._open.get((id(context), id(agent)))
        res = queue.popleft() if queue else None
        self.run.record(
            agents_usage(getattr(response, "usage", None)),
            res.model if res is not None else _model_name(agent),
            reservation=res,
            provider=self.provider,
        )

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self._own(agent):
            self.tool_start(agent, tool)

    def tool_start(self, agent: Any, tool: Any) -> None:
        """Count one tool call; attach these hooks to the sub-agent of an ``as_tool`` tool."""
        self._stop_pending()
        name = str(getattr(tool, "name", type(tool).__name__))
        effect = _raise_as_agents(
            lambda: self.run.before_tool_call(name, external_effect=name in self._effect_tools)
        )
        if effect is not None:
            self._effects.setdefault(id(agent), deque()).append(effect)
        sub = getattr(tool, "_agent_instance", None)  # set by Agent.as_tool
        if sub is not None and self._own(sub) and hasattr(sub, "hooks"):
            sub.hooks = _SubAgentHooks(self, sub.hooks)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        if self._own(agent):
            self.tool_end(agent, tool)

    def tool_end(self, agent: Any, tool: Any) -> None:
        """Confirm the effect of an effect tool that returned."""
        name = str(getattr(tool, "name", type(tool).__name__))
        queue = self._effects.get(id(agent))
        if name in self._effect_tools and queue:
            self.run.confirm_effect(queue.popleft())

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        if self._own(from_agent):
            self.handoff(to_agent)

    def handoff(self, to_agent: Any) -> None:
        """Count a handoff as a tool call (``transfer_to_<agent>``)."""
        self._stop_pending()
        name = f"transfer_to_{getattr(to_agent, 'name', 'agent')}"
        _raise_as_agents(lambda: self.run.before_tool_call(name))


#: ``Model.get_response`` / ``stream_response``'s positional parameters.
_CALL_ARGS = (
    "system_instructions", "input", "model_settings", "tools", "output_schema", "handoffs", "tracing"
)  # fmt: skip


#: id(input list) -> (that list, output cap): the final calls under way. The SDK hands the model
#: the input list it gave ``on_llm_start``, so the model finds its call by identity (an agent, and
#: its wrapped model, may serve several runs at once).
_FINAL: dict[int, tuple[Any, int]] = {}


def _final_call_model(model: Model) -> Model:
    return model if isinstance(model, _FinalCallModel) else _FinalCallModel(model)


def _instruction_item() -> dict[str, str]:
    return {"role": "user", "content": WRAP_UP_INSTRUCTION}


class _FinalCallModel(Model):
    """An Agents SDK model (``wrapped``) that sends a run's final call (one the hooks reserved, see
    :data:`_FINAL`) without tools or handoffs, with the instruction to answer now last and
    ``max_tokens`` capped; every other call, and every other attribute, passes through."""

    def __init__(self, wrapped: Model) -> None:
        self.wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def _final(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        call = {**dict(zip(_CALL_ARGS, args, strict=False)), **kwargs}
        given = call.get("input")
        pending = _FINAL.get(id(given))
        if pending is None or pending[0] is not given:
            return args, kwargs
        cap = pending[1]
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        call["input"] = [*items, _instruction_item()]
        call["model_settings"] = dataclasses.replace(
            call["model_settings"], max_tokens=cap, tool_choice=None, parallel_tool_calls=None
        )
        call["tools"], call["handoffs"] = [], []
        return (), call

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._final(args, kwargs)
        return await self.wrapped.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._final(args, kwargs)
        return self.wrapped.stream_response(*args, **kwargs)

    def get_retry_advice(self, request: Any) -> Any:
        return self.wrapped.get_retry_advice(request)

    async def close(self) -> None:
        await self.wrapped.close()


class _FinalCallProvider(ModelProvider):
    """``wrapped`` (a ``ModelProvider``; None: the SDK's default) whose models are
    :class:`_FinalCallModel`."""

    def __init__(self, wrapped: Any) -> None:
        from agents.models.multi_provider import MultiProvider

        self.wrapped: Any = (
            wrapped.wrapped if isinstance(wrapped, _FinalCallProvider) else wrapped or MultiProvider()
        )

    def get_model(self, model_name: str | None) -> Model:
        return _final_call_model(self.wrapped.get_model(model_name))

    async def aclose(self) -> None:
        closer = getattr(self.wrapped, "aclose", None)
        if closer is not None:
            await closer()


class _SubAgentHooks(AgentHooks):
    """Agent hooks that charge a sub-agent's calls to ``owner``'s run, then call the hooks the
    sub-agent had (``previous``)."""

    def __init__(self, owner: BudgetRunHooks, previous: Any) -> None:
        self.owner, self.previous = owner, previous

    def _charge(self, step: Callable[[], Any]) -> None:
        try:
            step()
        except BudgetExceeded as exc:
            self.owner._pending_stop = exc  # as_tool may swallow it: the run stops at its next step
            raise

    async def _then(self, name: str, *args: Any) -> None:
        if self.previous is not None:
            await getattr(self.previous, name)(*args)

    async def on_start(self, context: Any, agent: Any) -> None:
        await self._then("on_start", context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._then("on_end", context, agent, output)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self._charge(lambda: self.owner.llm_start(context, agent, system_prompt, input_items, False))
        await self._then("on_llm_start", context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.owner.llm_end(context, agent, response)
        await self._then("on_llm_end", context, agent, response)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self._charge(lambda: self.owner.tool_start(agent, tool))
        await self._then("on_tool_start", context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.owner.tool_end(agent, tool)
        await self._then("on_tool_end", context, agent, tool, result)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        self._charge(lambda: self.owner.handoff(agent))
        await self._then("on_handoff", context, agent, source)
