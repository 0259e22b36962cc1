"""Tool calls a model response asks for, counted against ``max_tool_calls`` by the client
wrappers (issue 20): Chat Completions ``message.tool_calls``, Responses ``*_call`` output items,
Anthropic ``*tool_use`` content blocks; in a stream, the same read from its chunks and events.

A wrapper sees the tool calls a response asks for, not which ones the agent runs. So the count
is settled at the wrapper's next model call: tool calls the agent counted itself in between
(``run.before_tool_call``) are not counted again; the rest are counted then. A response whose
tool calls cannot all fit the limit is refused at once (``BudgetExceeded``, ``budget_tools``),
before any of them runs.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["StreamToolCalls", "ToolCallCount", "response_tool_calls"]


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _is_call(kind: Any) -> bool:
    return isinstance(kind, str) and kind.endswith(("_call", "tool_use"))


def response_tool_calls(response: Any) -> list[str]:
    """Names of the tool calls in a Chat completion, a Responses response or an Anthropic message
    (objects or dicts); [] for anything else."""
    names: list[str] = []
    for choice in _get(response, "choices") or ():
        for call in _get(_get(choice, "message"), "tool_calls") or ():
            names.append(str(_get(_get(call, "function"), "name") or _get(call, "type") or "tool"))
    for item in _get(response, "output") or ():
        if _is_call(_get(item, "type")):
            names.append(str(_get(item, "name") or _get(item, "type")))
    content = _get(response, "content")
    if isinstance(content, list):
        for block in content:
            if _is_call(_get(block, "type")):
                names.append(str(_get(block, "name") or _get(block, "type")))
    return names


class StreamToolCalls:
    """The tool calls of one stream, from its chunks (Chat ``delta.tool_calls`` by index),
    Responses ``response.output_item.added`` events and Anthropic ``content_block_start``."""

    def __init__(self) -> None:
        self._calls: dict[tuple[int, int], str] = {}
        self._names: list[str] = []

    def add(self, chunk: Any) -> None:
        kind = _get(chunk, "type")
        if kind == "response.output_item.added":
            item = _get(chunk, "item")
            if _is_call(_get(item, "type")):
                self._names.append(str(_get(item, "name") or _get(item, "type")))
        elif kind == "content_block_start":
            block = _get(chunk, "content_block")
            if _is_call(_get(block, "type")):
                self._names.append(str(_get(block, "name") or _get(block, "type")))
        for choice in _get(chunk, "choices") or ():
            for call in _get(_get(choice, "delta"), "tool_calls") or ():
                key = (int(_get(choice, "index") or 0), int(_get(call, "index") or 0))
                name = _get(_get(call, "function"), "name")
                if key not in self._calls or (name and self._calls[key] == "tool"):
                    self._calls[key] = str(name or "tool")

    @property
    def names(self) -> list[str]:
        return [*self._names, *self._calls.values()]


class ToolCallCount:
    """One run's tool calls asked for and not yet counted (see the module doc); shared by every
    wrapper of the run (:meth:`of`), so a call through any of them settles them."""

    _runs: weakref.WeakKeyDictionary[Any, ToolCallCount] = weakref.WeakKeyDictionary()
    _runs_lock = threading.Lock()

    @classmethod
    def of(cls, run: Any) -> ToolCallCount:
        """The count of ``run`` (made on first use)."""
        with cls._runs_lock:
            count = cls._runs.get(run)
            if count is None:
                count = cls._runs[run] = cls(run)
            return count

    def __init__(self, run: Any) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._seen_at = 0  # the run's tool_calls when the pending calls were asked for

    def asked(self, names: list[str]) -> None:
        """A response asked for ``names``: refused now (BudgetExceeded from
        ``run.before_tool_call``) when they cannot all fit ``max_tool_calls``; else pending."""
        if not names:
            return
        self.settle()
        limit = self._run.limits.get("max_tool_calls")
        made = self._run.stats().tool_calls
        if limit is not None and made + len(names) > limit:
            for name in names:  # counts those that fit, then raises budget_tools
                self._run.before_tool_call(name)
        with self._lock:
            self._pending, self._seen_at = [*self._pending, *names], made

    def settle(self) -> None:
        """Count the pending tool calls the agent did not count itself (before the next call)."""
        with self._lock:
            pending, seen_at, self._pending = self._pending, self._seen_at, []
        if not pending:
            return
        counted = self._run.stats().tool_calls - seen_at
        for name in pending[max(0, counted) :]:
            self._run.before_tool_call(name)
