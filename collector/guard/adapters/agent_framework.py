"""A hard budget for Microsoft Agent Framework agents (extra ``agent-framework``): chat and
function middleware.

``middleware = budget_middleware(run)``; ``Agent(client=..., tools=..., middleware=middleware)``
(or ``agent.run(..., middleware=middleware)``):

- the chat middleware reserves, before each chat client call, the prompt estimate (messages and
  tool definitions) plus the options' ``max_tokens`` (else the budget's output left, at most
  ``max_output_tokens``, written into the options) and raises ``BudgetExceeded`` before the call
  when it does not fit; after it, it records the response's ``usage_details`` (streams: from the
  usage content of its updates, when it is consumed; a stream without usage is *unknown*,
  charged its reservation); a failed call is released when the API answered with a
  status, else charged; with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), a call that
  does not fit next to it becomes the run's final call: tool options removed, the instruction to
  answer now added as a last user message, ``max_tokens`` capped to the slice (the run then stops
  with ``budget_wrap_up``);
- the function middleware counts each function (tool) call against ``max_tool_calls`` before it
  runs, so several tool calls of one response are each checked; the framework hands a refused
  function's exception to the model and goes on, so the chat middleware raises the refusal again
  at the next call (the run stops there);
- sub-agents (an agent used as a tool, ``agent.as_tool()``) are charged when they carry the same
  middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agent_framework import ChatContext, ChatMiddleware, FunctionInvocationContext, FunctionMiddleware

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import OPENAI_TOOL_KEYS, WRAP_UP_INSTRUCTION
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.guard.results import BudgetExceeded
from budgetlens.usage import Usage, normalize_usage

__all__ = ["BudgetChatMiddleware", "BudgetFunctionMiddleware", "agent_framework_usage", "budget_middleware"]


def agent_framework_usage(details: Any) -> Usage | None:
    """Agent Framework ``UsageDetails`` (``input_token_count`` with all input, cache and reasoning
    counts as parts) as a :class:`budgetlens.Usage`, through :func:`normalize_usage` (cache
    parts larger than the input total are added); None without counts."""
    if not details:
        return None
    return normalize_usage(
        {
            "prompt_tokens": details.get("input_token_count"),
            "completion_tokens": details.get("output_token_count"),
            "cache_read_input_tokens": details.get("cache_read_input_token_count"),
            "cache_creation_input_tokens": details.get("cache_creation_input_token_count"),
            "completion_tokens_details": {"reasoning_tokens": details.get("reasoning_output_token_count")},
        }
    )


def budget_middleware(run: Any, **options: Any) -> list[Any]:
    """``[BudgetChatMiddleware(run, **options), BudgetFunctionMiddleware(run)]`` for an agent,
    sharing a pending tool refusal: the framework hands a function's exception to the model as
    its result and goes on, so the chat middleware raises it again at the next call."""
    functions = BudgetFunctionMiddleware(run)
    return [BudgetChatMiddleware(run, functions=functions, **options), functions]


class BudgetChatMiddleware(ChatMiddleware):
    """Chat middleware putting ``run`` (a ``RunBudget``) around each chat client call (see the
    module doc). ``max_output_tokens`` caps calls that set none; ``provider`` names the
    ``gen_ai.provider.name``; ``functions``: the function middleware whose pending refusal is
    raised at the next call."""

    def __init__(
        self,
        run: Any,
        *,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str = "openai",
        functions: BudgetFunctionMiddleware | None = None,
    ) -> None:
        self.run = run
        self._guard = CallGuard(run, provider, None, max_output_tokens)
        self._functions = functions

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        if self._functions is not None:
            self._functions.raise_pending()
        options = context.options if isinstance(context.options, dict) else dict(context.options or {})
        tools = [getattr(t, "name", t) for t in options.get("tools") or ()]
        prompt = estimate_tokens(list(context.messages), tools, options.get("instructions"))
        given = options.get("max_tokens")
        cap = self._guard.output_cap(prompt, given)
        model = options.get("model") or getattr(context.client, "model", None)
        model = model if isinstance(model, str) else None
        if self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            res = self._final(context, options, model, given)
        else:
            options.setdefault("max_tokens", cap)
            res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        context.options = options
        try:
            await call_next()
        except BaseException as exc:
            self._guard.failed(res, exc)
            raise
        if not context.stream:
            response = context.result
            self._guard.record(
                res, agent_framework_usage(getattr(response, "usage_details", None)), _model(response)
            )
            return
        seen: list[Any] = []  # the usage contents of the stream's updates (the latest wins)

        def on_update(update: Any) -> Any:
            seen.extend(c.usage_details for c in getattr(update, "contents", None) or () if c.type == "usage")
            return update

        def on_cleanup() -> None:  # after the stream was consumed (or left): usage seen, else unknown
            self._guard.record(res, agent_framework_usage(seen[-1]) if seen else None)

        stream: Any = context.result  # a ResponseStream when streaming (checked by the caller)
        stream.with_transform_hook(on_update).with_cleanup_hook(on_cleanup)

    def _final(self, context: ChatContext, options: dict[str, Any], model: str | None, given: Any) -> Any:
        """Make the call the run's final call from its wrap-up slice (see
        :mod:`budgetlens.guard.adapters._wrap_up`): the tool options removed,
        :data:`WRAP_UP_INSTRUCTION` added as a last user message, ``max_tokens`` capped to the slice;
        reserved with ``final=True`` (BudgetExceeded when even that does not fit)."""
        from agent_framework import Message

        for key in OPENAI_TOOL_KEYS:
            options.pop(key, None)
        context.messages = [*context.messages, Message("user", [WRAP_UP_INSTRUCTION])]
        prompt = estimate_tokens(list(context.messages), options.get("instructions"))
        ceiling = self._guard._ceiling
        left = self.run.output_budget(ceiling, prompt, final=True)
        cap = max(1, min(c for c in (given, left, ceiling) if isinstance(c, int) and not isinstance(c, bool)))
        options["max_tokens"] = cap
        return self.run.reserve(prompt + cap, model, output_tokens=cap, final=True)


def _model(response: Any) -> str | None:
    model = getattr(response, "model", None) or getattr(response, "model_id", None)
    return model if isinstance(model, str) else None


class BudgetFunctionMiddleware(FunctionMiddleware):
    """Function middleware counting each tool call against ``run``'s ``max_tool_calls`` before
    it runs."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self._pending: BudgetExceeded | None = None

    def raise_pending(self) -> None:
        """Raise a tool refusal the framework turned into a function result (once)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            raise pending

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        try:
            self.run.before_tool_call(str(getattr(context.function, "name", "function")))
        except BudgetExceeded as exc:
            self._pending = exc
            raise
        await call_next()
