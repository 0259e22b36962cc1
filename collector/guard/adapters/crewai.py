"""A hard budget for CrewAI crews and agents (extra ``crewai``): its model-call and tool-call
hooks, with its event bus for the provider's usage.

``budget = CrewBudget(run)``; ``with budget: crew.kickoff()`` (any agent, crew or direct ``LLM``
call made inside the ``with``):

- a ``before_llm_call`` hook reserves the prompt estimate (the messages) plus the LLM's
  ``max_tokens`` (else the budget's output left, at most ``max_output_tokens``, set as the LLM's
  ``max_tokens`` so the call cannot outgrow its reservation) and refuses a call that does not fit
  before it is sent. CrewAI swallows any exception of a hook except its ``HookAborted``, and turns
  ``return False`` into a ``ValueError`` its own handlers may absorb, so the refusal is raised as
  :class:`BudgetHookAborted` (a ``HookAborted``) whose ``__cause__`` is the ``BudgetExceeded``:
  ``with RunBudget(...)`` records it as the budget stop it is;
- CrewAI's hooks see no usage: each ``LLMCallCompletedEvent`` of its event bus (a model call's,
  not the report of a function CrewAI ran for the model, which carries no usage) records the provider's usage for the oldest open reservation (cache and reasoning
  parts included); an event without usage (CrewAI reports ``{"total_tokens": 0}``) is *unknown*,
  charged its reservation, never 0; an ``LLMCallFailedEvent`` carries only the error's message: an
  error the API answered with an HTTP status (the SDKs' ``Error code: 429 - ...``) releases the
  reservation (CrewAI's own retry is then reserved afresh), any other (timeout, lost connection,
  cut stream) is unknown, charged its reservation. The bus runs handlers on its own threads: each
  hook and the ``with`` exit wait for it (``flush``) before reading the budget;
- a ``before_tool_call`` hook counts each tool call against ``max_tool_calls`` before it runs;
  CrewAI hands a refused tool's message to the model and goes on, so the refusal is raised again
  by the next model call's hook, which stops the run.

With a wrap-up slice (``RunBudget(wrap_up_tokens=...)``) the call that does not fit next to it
becomes the run's final call (see :mod:`budgetlens.guard.adapters._wrap_up`): the hook reserves it
with ``final=True``, adds the instruction to answer now as a last user message (CrewAI's messages
are changed in place, as its hooks allow), caps the LLM's ``max_tokens`` to the slice and, as the
hook context offers no tool list, empties the agent executor's native tool list in place (the run
stops after this call anyway); the text answer is the agent's final answer (a ``ReAct`` text agent
is told the same, without tools to remove) and the run then stops with ``budget_wrap_up``.

The hooks are process-global while the ``with`` lasts (CrewAI snapshots them when an agent's
executor is built): run one guarded crew at a time per process.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.llm_events import LLMCallCompletedEvent, LLMCallFailedEvent, LLMCallType
from crewai.hooks import (
    HookAborted,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION, reserve_final
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.guard.results import BudgetExceeded, Reservation
from budgetlens.usage import normalize_usage

__all__ = ["BudgetHookAborted", "CrewBudget", "crew_usage"]

#: The OpenAI and Anthropic SDKs' message of an error the API answered with an HTTP status
#: (``Error code: 429 - {...}``); the failed event carries only the message.
_STATUS = re.compile(r"\bError code: [45]\d\d\b")

#: Seconds a hook waits for CrewAI's event bus to deliver pending usage events.
FLUSH_TIMEOUT_S = 30.0


class BudgetHookAborted(HookAborted):
    """CrewAI's ``HookAborted`` for a budget refusal; ``__cause__`` and ``budget_exceeded`` are
    the ``BudgetExceeded`` (its ``reason`` is the stop reason, e.g. ``budget_tokens``)."""

    def __init__(self, exceeded: BudgetExceeded) -> None:
        super().__init__(reason=f"budgetlens: {exceeded}", source="budgetlens")
        self.budget_exceeded = exceeded


def crew_usage(usage: Any, provider: str | None = None) -> Any:
    """A ``budgetlens.Usage`` from the usage dict of a CrewAI ``LLMCallCompletedEvent``
    (``prompt_tokens``, ``completion_tokens``, ``cached_prompt_tokens``, ``reasoning_tokens``:
    tokens; the cache a part of the prompt, reasoning a part of the output), or None (unknown)
    when it carries no counts (CrewAI's ``{"total_tokens": 0}`` for a response without usage).
    Raises ValueError naming the field for a bad count."""
    if not isinstance(usage, dict) or not ("prompt_tokens" in usage or "input_tokens" in usage):
        return None
    shaped = {k: v for k, v in usage.items() if k not in ("cached_prompt_tokens", "reasoning_tokens")}
    if "cached_prompt_tokens" in usage:
        shaped["prompt_tokens_details"] = {"cached_tokens": usage["cached_prompt_tokens"]}
    if "reasoning_tokens" in usage:
        shaped["completion_tokens_details"] = {"reasoning_tokens": usage["reasoning_tokens"]}
    return normalize_usage(shaped, provider)


class CrewBudget:
    """Puts ``run`` (a ``RunBudget``) around every model and tool call CrewAI makes while this
    context manager is entered (see the module doc). ``max_output_tokens`` caps calls whose LLM
    sets no ``max_tokens``; ``provider`` names the ``gen_ai.provider.name`` (default: the LLM's
    ``provider``, e.g. ``openai``); ``count_tokens(messages) -> int`` replaces the prompt estimate.
    Raises ValueError for a bad option."""

    def __init__(
        self,
        run: Any,
        *,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str | None = None,
        count_tokens: Callable[[list], int] | None = None,
    ) -> None:
        if count_tokens is not None and not callable(count_tokens):
            raise ValueError(f"count_tokens must be a callable taking the messages, got {count_tokens!r}")
        self.run, self._count = run, count_tokens
        self._provider = provider
        self._guard = CallGuard(run, provider or "openai", None, max_output_tokens, count_tool_calls=False)
        self._open: deque[tuple[Reservation, CallGuard]] = deque()
        self._lock = threading.Lock()
        self._caps: dict[int, int] = {}  # id(llm) -> the max_tokens this guard set on it
        self._refused: BudgetExceeded | None = None  # a tool refusal CrewAI handed to the model
        self._entered = False

    # -- the hooks -------------------------------------------------------------------------
    def before_llm_call(self, context: Any) -> None:
        """Reserve one model call (raises :class:`BudgetHookAborted` before it is sent)."""
        crewai_event_bus.flush(FLUSH_TIMEOUT_S)  # settle the usage of the calls before
        try:
            if self._refused is not None:
                raise self._refused
            self._reserve(context)
        except BudgetExceeded as exceeded:
            raise BudgetHookAborted(exceeded) from exceeded

    def _reserve(self, context: Any) -> None:
        llm = getattr(context, "llm", None)
        provider = self._provider or getattr(llm, "provider", None) or "openai"
        guard = CallGuard(self.run, str(provider), None, self._guard._ceiling, count_tool_calls=False)
        messages = list(getattr(context, "messages", None) or ())
        prompt = self._count(messages) if self._count is not None else estimate_tokens(messages)
        given = getattr(llm, "max_tokens", None)
        if given is not None and self._caps.get(id(llm)) == given:
            given = None  # the cap this guard set for the call before: compute it afresh
        cap = guard.output_cap(prompt, given)
        model = getattr(llm, "model", None)
        model = model if isinstance(model, str) else None
        if self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            res = self._final(context, guard, messages, model, given)
            cap, given = res.output_tokens, None  # the cap is set on the LLM below
        else:
            res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        if given is None and llm is not None and hasattr(llm, "max_tokens"):
            llm.max_tokens = cap
            self._caps[id(llm)] = cap
        with self._lock:
            self._open.append((res, guard))

    def _final(self, context: Any, guard: CallGuard, messages: list, model: Any, given: Any) -> Reservation:
        """Reserve the run's final call with the shared step (:func:`reserve_final`) and rewrite it
        (see the module doc): the instruction appended to CrewAI's messages, its tools emptied."""
        count = self._count
        if count is not None:
            guard = CallGuard(
                self.run,
                guard.provider,
                lambda kw: count(kw["messages"]),
                guard._ceiling,
                count_tool_calls=False,
            )
        request: dict[str, Any] = {"messages": messages, "model": model, "max_tokens": given}
        res = reserve_final(guard, request, (messages,), ("max_tokens",), "max_tokens")
        live = getattr(context, "messages", None)
        if isinstance(live, list):
            live.append({"role": "user", "content": WRAP_UP_INSTRUCTION})
        tools = getattr(getattr(context, "executor", None), "_openai_tools", None)
        if isinstance(tools, list):
            tools.clear()  # the list the executor hands to this call (the hook sees no other)
        return res

    def before_tool_call(self, context: Any) -> None:
        """Count one tool call (raises :class:`BudgetHookAborted` before it runs)."""
        try:
            self.run.before_tool_call(str(getattr(context, "tool_name", "tool")))
        except BudgetExceeded as exceeded:
            self._refused = exceeded
            raise BudgetHookAborted(exceeded) from exceeded

    # -- the event bus ---------------------------------------------------------------------
    def _take(self) -> tuple[Reservation, CallGuard] | None:
        with self._lock:
            return self._open.popleft() if self._open else None

    def _completed(self, source: Any, event: Any) -> None:
        if getattr(event, "call_type", None) == LLMCallType.TOOL_CALL and event.usage is None:
            return  # CrewAI's report of a function it ran for the model (a model call asking
            # for tools is a TOOL_CALL event too, with its usage): no model call
        taken = self._take()
        if taken is None:
            return
        res, guard = taken
        usage = crew_usage(getattr(event, "usage", None), guard.provider)
        guard.record(res, usage, getattr(event, "model", None))

    def _failed(self, source: Any, event: Any) -> None:
        taken = self._take()
        if taken is None:
            return
        res, guard = taken
        message = str(getattr(event, "error", ""))
        if _STATUS.search(message):  # the API answered with a status: nothing generated
            self.run.release(res)
        else:  # timeout, lost connection, cut stream: the model may have run
            guard.record(res, None, error=RuntimeError(message))

    # -- the context manager ---------------------------------------------------------------
    def __enter__(self) -> CrewBudget:
        if self._entered:
            raise RuntimeError("CrewBudget is already entered; use one per run")
        self._entered = True
        register_before_llm_call_hook(self.before_llm_call)
        register_before_tool_call_hook(self.before_tool_call)
        crewai_event_bus.on(LLMCallCompletedEvent)(self._completed)
        crewai_event_bus.on(LLMCallFailedEvent)(self._failed)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            crewai_event_bus.flush(FLUSH_TIMEOUT_S)
        finally:
            unregister_before_llm_call_hook(self.before_llm_call)
            unregister_before_tool_call_hook(self.before_tool_call)
            crewai_event_bus.off(LLMCallCompletedEvent, self._completed)
            crewai_event_bus.off(LLMCallFailedEvent, self._failed)
            self._entered = False
        # a reservation no event settled stays open: RunBudget.finish charges it as unknown
