"""Context compression for ``Action.SUMMARIZE``: keep the system prompt, the first user message
(the task itself, as it was) and the latest turns, replace the middle of the conversation with a
summary.

Messages are the chat messages an agent sends: mappings (or objects) with a ``role``
(``system``/``developer``, ``user``, ``assistant``, ``tool``) and a ``content`` (a string or a
list of content blocks), as in OpenAI Chat Completions and Anthropic Messages. The summary is
written by a callable the caller supplies (``summarize(model, messages) -> str``); see
``RunBudget.compress`` for the guarded variant that calls a client with the cheapest model of
the chain. Nothing here is recorded in telemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "SUMMARY_INSTRUCTION",
    "SUMMARY_PREFIX",
    "compress_messages",
    "split_for_summary",
    "transcript",
]

#: The system instruction sent with the transcript to the summarizing model.
SUMMARY_INSTRUCTION = (
    "Summarize this part of an agent's conversation for the agent itself: keep the goal, the "
    "decisions, facts and file names found, tool results that matter and what is left to do. "
    "Be brief; no preamble."
)
#: The summary message's text starts with this line.
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
_HEAD_ROLES = ("system", "developer")


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)


def _is_tool_result(message: Any) -> bool:
    """A tool's answer: role ``tool`` (OpenAI), or a user turn of ``tool_result`` blocks (Anthropic)."""
    if _field(message, "role") == "tool":
        return True
    content = _field(message, "content")
    return (
        _field(message, "role") == "user"
        and isinstance(content, list)
        and any(_field(block, "type") == "tool_result" for block in content)
    )


def split_for_summary(messages: Sequence[Any], keep_last: int = 4) -> tuple[list, list, list]:
    """Split ``messages`` into (head, middle, tail): the leading system/developer messages and the
    first user message after them (the task, kept as it is; not a tool result), the part to summarize, and the last ``keep_last`` (int >= 1) messages, widened backwards so that a
    tool result is never separated from the assistant turn that called the tool. The middle is
    empty when there is nothing to summarize. Raises ValueError for ``keep_last`` < 1."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an int >= 1 (messages), got {keep_last!r}")
    messages = list(messages)
    start = 0
    while start < len(messages) and _field(messages[start], "role") in _HEAD_ROLES:
        start += 1
    if (
        start < len(messages)
        and _field(messages[start], "role") == "user"
        and not _is_tool_result(messages[start])
    ):
        start += 1  # the task itself is never summarized
    cut = max(start, len(messages) - keep_last)
    while cut > start and _is_tool_result(messages[cut]):
        cut -= 1
    return messages[:start], messages[start:cut], messages[cut:]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            for key in ("text", "content", "input", "arguments"):
                value = _field(block, key)
                if value:
                    parts.append(value if isinstance(value, str) else _text(value) or repr(value))
                    break
        return "\n".join(parts)
    return "" if content is None else str(content)


def transcript(messages: Sequence[Any]) -> str:
    """The messages as plain text, one ``role: text`` paragraph each (tool calls by name)."""
    lines = []
    for message in messages:
        text = _text(_field(message, "content"))
        for call in _field(message, "tool_calls") or ():
            function = _field(call, "function")
            text += f"\n[tool call {_field(function, 'name')}: {_field(function, 'arguments')}]"
        lines.append(f"{_field(message, 'role')}: {text.strip()}")
    return "\n\n".join(lines)


def compress_messages(
    messages: Sequence[Any],
    summarize: Callable[[str | None, list], str],
    *,
    keep_last: int = 4,
    model: str | None = None,
) -> list:
    """``messages`` with the middle (see :func:`split_for_summary`) replaced by one ``user``
    message ``SUMMARY_PREFIX + summarize(model, middle)``; unchanged (a new list) when there is no
    middle. ``summarize`` gets the model to use (may be None) and the middle messages and returns
    the summary text (str). Raises ValueError as :func:`split_for_summary` and when
    ``summarize`` returns no text."""
    head, middle, tail = split_for_summary(messages, keep_last)
    if not middle:
        return head + tail
    summary = summarize(model, middle)
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError(f"summarize must return the summary text (a non-empty str), got {summary!r}")
    return [*head, {"role": "user", "content": SUMMARY_PREFIX + summary.strip()}, *tail]


def cheapest_model(chain: Sequence[str], provider: str | None = None) -> str | None:
    """The model of ``chain`` with the lowest price of 1,000 input + 1,000 output tokens
    (:func:`budgetlens.pricing.cost_usd`); the chain's last model (by convention the cheapest)
    when none is priced; None for an empty chain."""
    from budgetlens.pricing import cost_usd
    from budgetlens.usage import Usage

    priced = []
    for position, model in enumerate(chain):
        try:
            cost = cost_usd(model, Usage(1000, 1000), provider)
        except Exception:  # a price lookup never breaks the agent
            cost = None
        if cost is not None:
            priced.append((cost, position, model))
    if priced:
        return min(priced)[2]
    return chain[-1] if chain else None


def compress_run(
    run: Any,
    messages: Any,
    *,
    summarize: Callable[[str | None, list], str] | None = None,
    client: Any = None,
    keep_last: int = 4,
    max_summary_tokens: int = 1024,
) -> list:
    """``RunBudget.compress``: compress a conversation when ``SUMMARIZE`` is advised: keep the system
    prompt, the first user message (the task, as it is) and the last ``keep_last`` messages, the middle
    replaced by one summary (:func:`compress_messages`) from ``summarize(model, middle) -> str``, else
    from ``client`` (OpenAI or Anthropic, plain or wrapped) called with ``run.cheapest_model()`` and
    ``max_summary_tokens`` through ``run``'s budget. Returns the new message list. Raises ValueError
    when neither or both are given; BudgetExceeded when the summary call does not fit."""
    if (summarize is None) == (client is None):
        raise ValueError("compress needs exactly one of summarize (a callable) or client")
    if summarize is None:
        summarize = client_summarizer(run, client, max_summary_tokens)
    return compress_messages(messages, summarize, keep_last=keep_last, model=run.cheapest_model())


def client_summarizer(run: Any, client: Any, max_tokens: int) -> Callable[[str | None, list], str]:
    """A ``summarize(model, messages)`` that asks ``client`` for the summary: an Anthropic client
    (``client.messages.create``) or an OpenAI one (``client.chat.completions.create``). A client
    wrapped by :mod:`budgetlens.adapters` budgets itself; a plain one is budgeted here through
    ``run`` (a ``RunBudget``: reserve the prompt estimate + ``max_tokens``, record the usage)."""
    from budgetlens.guard.estimate import estimate_tokens

    wrapped = getattr(client, "budgetlens_run", None) is not None
    anthropic = hasattr(client, "messages") and not hasattr(client, "chat")

    def summarize(model: str | None, middle: list) -> str:
        text = transcript(middle)
        if anthropic:
            kwargs: dict[str, Any] = {
                "model": model,
                "max_tokens": max_tokens,
                "system": SUMMARY_INSTRUCTION,
                "messages": [{"role": "user", "content": text}],
            }
        else:
            kwargs = {
                "model": model,
                "max_tokens": max_tokens,
                "messages": [
                    {"role": "system", "content": SUMMARY_INSTRUCTION},
                    {"role": "user", "content": text},
                ],
            }
        create = client.messages.create if anthropic else client.chat.completions.create
        if wrapped:
            response = create(**kwargs)
        else:
            prompt = estimate_tokens(kwargs.get("system"), kwargs["messages"])
            res = run.reserve(prompt + max_tokens, model, output_tokens=max_tokens)
            try:
                response = create(**kwargs)
            except BaseException:
                run.release(res)
                raise
            run.record(getattr(response, "usage", None), model, reservation=res)
        if anthropic:
            return "".join(getattr(b, "text", "") for b in response.content)
        return response.choices[0].message.content or ""

    return summarize
