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
- with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), the call that does not fit next to it
  becomes the run's final call (see :mod:`budgetlens.guard.adapters._wrap_up`). smolagents ends a
  run through its ``final_answer`` tool, so that one tool stays: a ``ToolCallingAgent`` is offered
  ``final_answer`` alone, a ``CodeAgent`` is told to write code that only calls it
  (:data:`FINAL_ANSWER_INSTRUCTION`, as a last user message), ``max_tokens`` capped to the slice.
  A reply that still is no final answer is taken as one, so the run ends on it: a
  ``ToolCallingAgent``'s text becomes a ``final_answer`` call with that text, a ``CodeAgent``'s
  text without a code block becomes ``final_answer(text)`` in the agent's code tags (not with
  ``use_structured_outputs_internally``, whose JSON is left as it is). The run then stops with
  ``budget_wrap_up``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._proxy import Proxy
from budgetlens.guard.adapters._wrap_up import FINAL_ANSWER_INSTRUCTION, reserve_final
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
    agent.model._code_tags = getattr(agent, "code_block_tags", None)  # a CodeAgent's
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


def _described(tool: Any) -> tuple[Any, Any, Any]:
    return (getattr(tool, "name", ""), getattr(tool, "description", ""), getattr(tool, "inputs", None))


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
        self._code_tags: Any = None

    def _reserve(self, messages: Any, tools: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, Any, bool]:
        """(reservation, messages, tools) of the call, and whether it is the run's final call
        (then rewritten: see the module doc)."""
        self._state.raise_pending()
        described = [_described(t) for t in tools or ()]
        request = {"messages": list(messages), "tools": described}
        given = kwargs.get("max_tokens", (getattr(self._target, "kwargs", None) or {}).get("max_tokens"))
        prompt = self._guard.prompt_tokens(request, (request["messages"], described))
        cap = self._guard.output_cap(prompt, given)
        model = getattr(self._target, "model_id", None)
        if self._guard.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            return self._final(messages, tools, kwargs, given, model)
        kwargs.setdefault("max_tokens", cap)
        return self._guard.run.reserve(prompt + cap, model, output_tokens=cap), messages, tools, False

    def _final(
        self, messages: Any, tools: Any, kwargs: dict[str, Any], given: Any, model: Any
    ) -> tuple[Any, Any, Any, bool]:
        """Reserve the run's final call with the shared step (:func:`reserve_final`, with
        :data:`FINAL_ANSWER_INSTRUCTION`): only ``final_answer`` offered, the instruction last,
        ``max_tokens`` capped to the slice."""
        from smolagents.models import ChatMessage, MessageRole

        kept = [t for t in tools or () if getattr(t, "name", None) == "final_answer"] if tools else None
        request = {"messages": list(messages), "tools": [_described(t) for t in kept or ()]}
        request.update(model=model, max_tokens=given)
        res = reserve_final(
            self._guard,
            request,
            (list(messages), request["tools"]),
            ("max_tokens",),
            "max_tokens",
            FINAL_ANSWER_INSTRUCTION,
        )
        kwargs["max_tokens"] = request["max_tokens"]
        ask = ChatMessage(role=MessageRole.USER, content=[{"type": "text", "text": FINAL_ANSWER_INSTRUCTION}])
        return res, [*messages, ask], kept, True

    def _as_final_answer(self, message: Any, tools: Any, kwargs: dict[str, Any]) -> Any:
        """The final call's reply as a final answer (see the module doc), else as it is."""
        from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction

        text = message.content if isinstance(message.content, str) else None
        if text is None or kwargs.get("response_format") is not None:
            return message
        if tools is not None and not message.tool_calls:
            call = ChatMessageToolCallFunction(name="final_answer", arguments={"answer": text})
            message.tool_calls = [ChatMessageToolCall(function=call, id="budgetlens_final", type="function")]
        elif tools is None and self._code_tags is not None:
            opening, closing = self._code_tags
            if re.search(rf"{opening}(.*?){closing}", text, re.DOTALL) is None:
                opening = "```python" if opening.startswith("```") else opening
                message.content = f"{text}\n{opening}\nfinal_answer({text!r})\n{closing}"
        return message

    def generate(
        self,
        messages: Any,
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The model's ``generate``, reserved before and recorded after."""
        res, messages, tools_to_call_from, final = self._reserve(messages, tools_to_call_from, kwargs)
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
        return self._as_final_answer(message, tools_to_call_from, kwargs) if final else message

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
        ends (the deltas' ``token_usage`` summed; unknown when none reported any). The run's final
        call is rewritten as in ``generate``, without taking a reply that is no final answer as one."""
        res, messages, tools_to_call_from, _final = self._reserve(messages, tools_to_call_from, kwargs)
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
