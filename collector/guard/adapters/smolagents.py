"""A hard budget for smolagents agents (extra ``smolagents``).

``agent = CodeAgent(tools=..., model=...)``; ``guard_smolagent(agent, run)``; ``agent.run(task)``:

- the agent's model (and each managed sub-agent's, recursively) is replaced by a guarded proxy:
  before each ``generate`` / ``generate_stream`` it reserves the prompt estimate (messages, tool
  descriptions) plus the call's ``max_tokens`` (else the budget's output left, at most
  ``max_output_tokens``, passed as ``max_tokens``) and raises ``BudgetExceeded`` before the call
  when it does not fit; after it records the usage of the raw provider response when the model
  keeps one (cache and reasoning parts included), else smolagents' ``token_usage``; a call without
  usage is *unknown*, charged its reservation; a failed call is released when the API answered
  with a status, else charged;
- each tool call (the tools' ``forward``, in a ``CodeAgent``'s code or a ``ToolCallingAgent``'s
  calls, and each call of a managed agent; ``final_answer`` excluded) counts against ``max_tool_calls`` before it runs (a tool
  object shared by several agents counts for the run guarded last: give concurrent runs their
  own tool objects);
- smolagents turns a tool's exception into an error message for the model and goes on: a tool
  refusal is raised again by the agent's next model call, so the run stops there. The refusal
  leaves ``agent.run`` wrapped in smolagents' ``AgentGenerationError`` (its ``__cause__``):
  ``with RunBudget(...)`` records it as the budget stop it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._proxy import Proxy
from budgetlens.guard.results import BudgetExceeded
from budgetlens.usage import Usage, normalize_usage

__all__ = ["guard_smolagent"]

_UNCOUNTED_TOOLS = frozenset({"final_answer"})


def guard_smolagent(
    agent: Any,
    run: Any,
    *,
    count_tokens: Callable[[dict[str, Any]], int] | None = None,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    provider: str | None = None,
) -> Any:
    """Guard ``agent`` (a smolagents ``MultiStepAgent``: ``CodeAgent``, ``ToolCallingAgent``)
    and its managed agents by ``run`` (a ``RunBudget``), in place; returns ``agent``.
    ``count_tokens(request) -> int`` (``request``: ``{"messages": ..., "tools": ...}``) replaces
    the prompt estimate. Raises ValueError for an object without ``model`` and ``tools``."""
    if not hasattr(agent, "model") or not isinstance(getattr(agent, "tools", None), dict):
        raise ValueError(f"guard_smolagent takes a smolagents agent (with model and tools), got {agent!r}")
    state = _RunState()
    _guard_agent(agent, run, state, count_tokens, max_output_tokens, provider)
    return agent


class _RunState:
    """The refusal of a tool that smolagents turned into a message (raised at the next call)."""

    def __init__(self) -> None:
        self.pending: BudgetExceeded | None = None

    def raise_pending(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            raise pending


def _guard_agent(agent: Any, run: Any, state: _RunState, count: Any, ceiling: int, provider: Any) -> None:
    if not isinstance(agent.model, GuardedSmolModel):
        name = provider or type(agent.model).__name__.removesuffix("Model").lower() or "smolagents"
        agent.model = GuardedSmolModel(agent.model, CallGuard(run, name, count, ceiling), state)
    for tool_name, tool in agent.tools.items():
        if tool_name not in _UNCOUNTED_TOOLS:
            # a tool object shared by agents is bound to the run guarded last (its own forward kept)
            original = getattr(tool, "_budgetlens_forward", None) or tool.forward
            tool._budgetlens_forward = original
            tool.forward = _counted(original, str(tool_name), run, state)
    managed = getattr(agent, "managed_agents", None) or {}
    for sub_name, sub in list(managed.items()):
        inner = sub._target if isinstance(sub, _CountedAgent) else sub
        _guard_agent(inner, run, state, count, ceiling, provider)
        managed[sub_name] = _CountedAgent(inner, run, state)


class _CountedAgent(Proxy):
    """A managed agent whose calls (the manager's tool calls of it) count against
    ``max_tool_calls``; its own model and tools are guarded too."""

    def __init__(self, agent: Any, run: Any, state: _RunState) -> None:
        super().__init__(agent)
        self._call = _counted(agent.__call__, str(getattr(agent, "name", "managed_agent")), run, state)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)


def _counted(forward: Callable[..., Any], name: str, run: Any, state: _RunState) -> Callable[..., Any]:
    @functools.wraps(forward)
    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            run.before_tool_call(name)
        except BudgetExceeded as exc:
            state.pending = exc  # smolagents hands tool errors to the model: stop at the next call
            raise
        return forward(*args, **kwargs)

    return counted


def _usage(message: Any) -> Usage | None:
    """The usage of a smolagents ``ChatMessage``: the raw provider response's when it has one,
    else ``token_usage`` (input and output totals); None when neither reports tokens."""
    raw = getattr(message, "raw", None)
    if raw is not None:
        try:
            usage = normalize_usage(raw)
        except ValueError:
            usage = None
        if usage is not None:
            return usage
    return _token_usage(getattr(message, "token_usage", None))


def _token_usage(token_usage: Any) -> Usage | None:
    if token_usage is None or not (token_usage.input_tokens or token_usage.output_tokens):
        return None
    return Usage(int(token_usage.input_tokens), int(token_usage.output_tokens))


class GuardedSmolModel(Proxy):
    """A smolagents model whose ``generate`` / ``generate_stream`` go through a budget (see
    :func:`guard_smolagent`); other attributes pass through."""

    def __init__(self, model: Any, guard: CallGuard, state: _RunState) -> None:
        super().__init__(model)
        self._guard, self._state = guard, state

    def _reserve(self, messages: Any, tools: Any, kwargs: dict[str, Any]) -> Any:
        self._state.raise_pending()
        described = [
            (getattr(t, "name", ""), getattr(t, "description", ""), getattr(t, "inputs", None))
            for t in tools or ()
        ]
        request = {"messages": list(messages), "tools": described}
        given = kwargs.get("max_tokens", (getattr(self._target, "kwargs", None) or {}).get("max_tokens"))
        prompt = self._guard.prompt_tokens(request, (request["messages"], described))
        cap = self._guard.output_cap(prompt, given)
        kwargs.setdefault("max_tokens", cap)
        return self._guard.run.reserve(
            prompt + cap, getattr(self._target, "model_id", None), output_tokens=cap
        )

    def generate(
        self,
        messages: Any,
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The model's ``generate``, reserved before and recorded after."""
        res = self._reserve(messages, tools_to_call_from, kwargs)
        try:
            message = self._target.generate(
                messages,
                stop_sequences=stop_sequences,
                response_format=response_format,
                tools_to_call_from=tools_to_call_from,
                **kwargs,
            )
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        model = getattr(getattr(message, "raw", None), "model", None)
        self._guard.record(res, _usage(message), model if isinstance(model, str) else None)
        return message

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.generate(*args, **kwargs)

    def generate_stream(
        self,
        messages: Any,
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """The model's ``generate_stream``, reserved before the first delta and recorded when it
        ends (the deltas' ``token_usage`` summed; unknown when none reported any)."""
        res = self._reserve(messages, tools_to_call_from, kwargs)
        total: Usage | None = None
        try:
            for delta in self._target.generate_stream(
                messages,
                stop_sequences=stop_sequences,
                response_format=response_format,
                tools_to_call_from=tools_to_call_from,
                **kwargs,
            ):
                usage = _token_usage(getattr(delta, "token_usage", None))
                if usage is not None:
                    total = usage if total is None else total + usage
                yield delta
        except BaseException as exc:
            if total is None:
                self._guard.failed(res, exc)
            else:
                self._guard.record(res, total, error=exc)
            raise
        self._guard.record(res, total)
