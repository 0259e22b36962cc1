"""A hard budget for pydantic-ai agents (extra ``pydantic-ai``): a wrapper model.

``agent = Agent(BudgetModel(model, run), ...)`` (or ``agent.run(..., model=BudgetModel(...))``).
pydantic-ai's own ``UsageLimits`` checks tokens only after a response, so a second call can
pass a limit before it is refused; the wrapper reserves before each request instead:

- before each ``request`` / ``request_stream`` it reserves the prompt estimate (messages, tool
  definitions) plus the settings' ``max_tokens`` (else the budget's output left, at most
  ``max_output_tokens``, written into the request's settings) and raises ``BudgetExceeded``
  before the request is sent when it does not fit;
- after it records the response's usage (``RequestUsage``: input with cache, output with
  reasoning), priced by the model the response names; a response with ``unmeasured_requests``
  (no usage) or a stream that ends without usage is *unknown*, charged its reservation;
- the tool calls of each response are counted against ``max_tool_calls`` (pydantic-ai runs all
  of them) before any runs;
- a request that fails with an HTTP status (``ModelHTTPError``) releases its reservation; any
  other failure (timeout, lost connection) is recorded as unknown, charged its reservation;
- with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), a request that does not fit next to
  it becomes the run's final call: function tools removed, the instruction to answer now added
  to the last request, ``max_tokens`` capped to the slice; the run then stops with
  ``budget_wrap_up``.

Sub-agents (an agent called from a tool) are charged when their model is a ``BudgetModel`` of
the same run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.usage import Usage

__all__ = ["BudgetModel", "pydantic_ai_usage"]


def pydantic_ai_usage(usage: Any) -> Usage | None:
    """A pydantic-ai ``RequestUsage`` as a :class:`budgetlens.Usage` (its totals already hold the
    cache and reasoning parts); None when the response carried no usage."""
    if usage is None or getattr(usage, "unmeasured_requests", None):
        return None
    inp, out = int(usage.input_tokens or 0), int(usage.output_tokens or 0)
    if not (inp or out):
        return None
    read, write = int(usage.cache_read_tokens or 0), int(usage.cache_write_tokens or 0)
    return Usage(
        inp,
        out,
        cache_read_tokens=min(read, inp),
        cache_write_tokens=min(write, max(0, inp - read)),
        reasoning_tokens=min(int(getattr(usage, "output_reasoning_tokens", 0) or 0), out),
    )


def _stream_usage(stream: Any) -> Any:
    usage = stream.usage  # a property in pydantic-ai 1.x and later, a method before
    return usage() if callable(usage) else usage


def _tool_calls(response: Any) -> list[str]:
    return [
        str(p.tool_name) for p in getattr(response, "parts", ()) if getattr(p, "part_kind", "") == "tool-call"
    ]


class BudgetModel(WrapperModel):
    """``wrapped`` (a pydantic-ai ``Model`` or model name) whose requests go through ``run`` (a
    ``RunBudget``); see the module doc. ``count_tokens(messages) -> int`` replaces the prompt
    estimate; ``max_output_tokens`` caps requests whose settings set no ``max_tokens``;
    ``provider`` names the ``gen_ai.provider.name`` (default: the model's ``system``)."""

    def __init__(
        self,
        wrapped: Model | str,
        run: Any,
        *,
        count_tokens: Callable[[list], int] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.run = run
        self._guard = CallGuard(run, provider or str(self.wrapped.system), None, max_output_tokens)
        self._count, self._ceiling = count_tokens, max_output_tokens

    def _prompt(self, messages: list, params: Any) -> int:
        tools = [
            getattr(t, "parameters_json_schema", None) or getattr(t, "name", "")
            for t in (
                *(getattr(params, "function_tools", None) or ()),
                *(getattr(params, "output_tools", None) or ()),
            )
        ]
        return self._count(messages) if self._count is not None else estimate_tokens(list(messages), tools)

    def _reserve(self, messages: list, settings: Any, params: Any) -> tuple[list, Any, Any, Any]:
        settings = dict(settings or {})
        prompt = self._prompt(messages, params)
        given = settings.get("max_tokens")
        cap = self._guard.output_cap(prompt, given)
        model = self.wrapped.model_name
        if self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            return self._final(messages, settings, params, given)
        settings.setdefault("max_tokens", cap)
        res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        return messages, settings, params, res

    def _final(
        self, messages: list, settings: dict[str, Any], params: Any, given: Any
    ) -> tuple[list, Any, Any, Any]:
        """The run's final call from its wrap-up slice (see :mod:`budgetlens.guard.adapters._wrap_up`):
        the function tools removed (output tools kept: a structured answer needs them),
        :data:`WRAP_UP_INSTRUCTION` added to the last request, ``max_tokens`` capped to the slice;
        reserved with ``final=True`` (BudgetExceeded when even that does not fit)."""
        from pydantic_ai.messages import ModelRequest, UserPromptPart

        if params is not None and dataclasses.is_dataclass(params) and not isinstance(params, type):
            params = dataclasses.replace(params, function_tools=[])
        ask = UserPromptPart(content=WRAP_UP_INSTRUCTION)
        last = messages[-1] if messages else None
        if isinstance(last, ModelRequest):
            messages = [*messages[:-1], dataclasses.replace(last, parts=[*last.parts, ask])]
        else:
            messages = [*messages, ModelRequest(parts=[ask])]
        prompt = self._prompt(messages, params)
        left = self.run.output_budget(self._ceiling, prompt, final=True)
        cap = max(
            1, min(c for c in (given, left, self._ceiling) if isinstance(c, int) and not isinstance(c, bool))
        )
        settings["max_tokens"] = cap
        res = self.run.reserve(prompt + cap, self.wrapped.model_name, output_tokens=cap, final=True)
        return messages, settings, params, res

    def _recorded(self, res: Any, response: Any, usage: Any) -> None:
        self._guard.record(res, pydantic_ai_usage(usage), getattr(response, "model_name", None))
        for name in _tool_calls(response):
            self.run.before_tool_call(name)

    async def request(self, messages: list, model_settings: Any, model_request_parameters: Any) -> Any:
        messages, settings, params, res = self._reserve(messages, model_settings, model_request_parameters)
        try:
            response = await self.wrapped.request(messages, settings, params)
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        self._recorded(res, response, response.usage)
        return response

    @asynccontextmanager
    async def request_stream(
        self, messages: list, model_settings: Any, model_request_parameters: Any, run_context: Any = None
    ) -> AsyncIterator[Any]:
        messages, settings, params, res = self._reserve(messages, model_settings, model_request_parameters)
        stream = None
        try:
            async with self.wrapped.request_stream(
                messages,
                settings,
                params,
                run_context,
            ) as stream:
                yield stream
        except BaseException as exc:
            if stream is None:
                self._guard.failed(res, exc)
            else:
                self._guard.record(res, pydantic_ai_usage(_stream_usage(stream)), stream.model_name, exc)
            raise
        self._recorded(res, stream.get(), _stream_usage(stream))
