"""A hard budget for the official Anthropic Python client (extra ``anthropic``).

``client = wrap_anthropic(Anthropic(), run)``: every ``messages.create`` / ``.parse`` /
``.stream(...)`` and the same under ``beta.messages`` (sync with ``Anthropic``, async with
``AsyncAnthropic``, plain or ``stream=True``) first reserves the prompt estimate plus the
request's ``max_tokens`` from ``run`` (raising ``BudgetExceeded`` before the request is sent when
it does not fit), then records the response's usage (for streams: ``message_start``'s input and
cache counts and the last ``message_delta``'s output count; a stream that ends before its
``message_delta`` is *partial*: its output is charged at the reservation's output part, never
message_start's 1). Tool calls a response asks for count against ``max_tool_calls`` (see
:mod:`budgetlens.guard.adapters._tools`). ``with_options(...)``, ``copy(...)`` and
``with_middleware(...)`` return a guarded client on the same budget.

Refused with :class:`UnguardedCallError` (naming the method; nothing is sent): message batches
(``messages.batches``, ``beta.messages.batches``), ``beta.messages.tool_runner`` (it calls the
unwrapped client; run the tool loop on the guarded client instead), ``with_raw_response`` /
``with_streaming_response``, and ``beta.agents`` / ``beta.sessions`` / ``beta.deployments`` /
``beta.deployment_runs``. ``count_tokens`` (free) and resources without model calls pass through.

Errors: an API error with a status releases the reservation; a timeout or broken connection is
recorded with unknown usage (charged its reservation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._endpoint import GuardedCalls
from budgetlens.guard.adapters._proxy import Proxy
from budgetlens.guard.adapters._refuse import BY_HAND_HINT, RAW_HINT, Refused
from budgetlens.guard.task_budget import add_anthropic_task_budget

__all__ = ["wrap_anthropic"]

_RAW = ("with_raw_response", "with_streaming_response")
_BETA_REFUSED = ("agents", "sessions", "deployments", "deployment_runs")
_TOOL_RUNNER_HINT = (
    "the tool runner calls the unwrapped client; loop over client.beta.messages.create (guarded) "
    "and run the tools yourself"
)


def wrap_anthropic(
    client: Any,
    run: Any,
    *,
    count_tokens: Callable[[dict[str, Any]], int] | None = None,
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
    count_tool_calls: bool = True,
    task_budget: bool = False,
) -> Any:
    """``client`` (``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``) guarded by ``run``
    (a ``RunBudget``). ``count_tokens(request_kwargs) -> int`` replaces the prompt estimate (e.g.
    through ``client.messages.count_tokens``); ``max_output_tokens`` fills ``max_tokens`` when a
    request omits it; ``count_tool_calls`` counts the tool calls responses ask for; ``task_budget=True``
    sends the run's Anthropic task budget (total and remaining tokens, see
    :mod:`budgetlens.guard.task_budget`) with each request. Raises ValueError for a client of another
    kind or a bad option."""
    if not isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        raise ValueError(
            f"wrap_anthropic takes an anthropic.Anthropic or anthropic.AsyncAnthropic client, got {client!r}"
        )
    if not isinstance(task_budget, bool):
        raise ValueError(f"task_budget must be True or False, got {task_budget!r}")
    guard = CallGuard(run, "anthropic", count_tokens, max_output_tokens, count_tool_calls)
    guard.task_budget = task_budget
    return GuardedAnthropic(client, guard, isinstance(client, anthropic.AsyncAnthropic))


class GuardedAnthropic(Proxy):
    """An Anthropic client whose Messages calls go through a budget (see :func:`wrap_anthropic`)."""

    def __init__(self, client: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(client)
        self.budgetlens_run = guard.run
        self._guard, self._is_async = guard, is_async
        self.messages = _Messages(client.messages, guard, is_async, "messages")
        self.beta = _Beta(client.beta, guard, is_async)
        for name in _RAW:
            setattr(self, name, Refused(name, RAW_HINT))

    def _again(self, client: Any) -> GuardedAnthropic:
        return GuardedAnthropic(client, self._guard, self._is_async)

    def with_options(self, **options: Any) -> GuardedAnthropic:
        """The SDK's ``with_options``, guarded by the same budget."""
        return self._again(self._target.with_options(**options))

    def copy(self, **options: Any) -> GuardedAnthropic:
        """The SDK's ``copy``, guarded by the same budget."""
        return self._again(self._target.copy(**options))

    def with_middleware(self, *args: Any, **kwargs: Any) -> GuardedAnthropic:
        """The SDK's ``with_middleware``, guarded by the same budget."""
        return self._again(self._target.with_middleware(*args, **kwargs))


class _Beta(Proxy):
    def __init__(self, beta: Any, guard: CallGuard, is_async: bool) -> None:
        super().__init__(beta)
        self.messages = _Messages(beta.messages, guard, is_async, "beta.messages")
        vars(self.messages)["tool_runner"] = Refused("beta.messages.tool_runner", _TOOL_RUNNER_HINT)
        for name in _BETA_REFUSED:
            setattr(self, name, Refused(f"beta.{name}", BY_HAND_HINT))
        for name in _RAW:
            setattr(self, name, Refused(f"beta.{name}", RAW_HINT))


def _prompt(kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (kwargs.get("system"), kwargs.get("messages"), kwargs.get("tools"), kwargs.get("output_format"))


class _Messages(Proxy):
    def __init__(self, messages: Any, guard: CallGuard, is_async: bool, path: str) -> None:
        super().__init__(messages)
        self._guard, self._beta = guard, path.startswith("beta")
        self._calls = GuardedCalls(messages, guard, is_async, self._prepare)
        self.create, self.parse = self._calls.create, self._calls.parse
        self.batches = Refused(f"{path}.batches", BY_HAND_HINT)
        for name in _RAW:
            setattr(self, name, Refused(f"{path}.{name}", RAW_HINT))

    def _prepare(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        kwargs = dict(kwargs)
        if self._guard.task_budget:
            add_anthropic_task_budget(kwargs, self._guard.run, beta=self._beta)
        return kwargs, self._guard.reserve(kwargs, _prompt(kwargs), ("max_tokens",), "max_tokens")

    def stream(self, **kwargs: Any) -> Any:
        """``client.messages.stream(...)``: the SDK's stream manager, guarded (reserved on
        entry, recorded with the final message's usage on exit)."""
        return self._calls.stream(*self._prepare(kwargs))
