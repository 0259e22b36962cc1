"""The adapters' final call from the wrap-up slice (issue 21 item 1). SDK-free.

When a run has a wrap-up slice (``RunBudget(wrap_up_tokens=..., wrap_up_usd=...)``) and the next
request would not fit next to it (``RunBudget.wrap_up_due``), the adapter turns that request into
the run's final call: tools are removed, a short instruction to answer now is added, the output
cap is the final call's output budget (the slice), and it is reserved with ``final=True``. After
it the run stops with ``budget_wrap_up``. Request shapes: OpenAI Chat Completions (``messages``),
OpenAI Responses (``instructions``), Anthropic Messages (``messages``; a conversation that already
holds ``tool_use`` / ``tool_result`` blocks keeps its tool definitions, as the API requires, with
``tool_choice`` ``none``) and LiteLLM's (OpenAI-shaped messages capped by ``max_tokens``: read as
the Anthropic shape, every OpenAI tool key removed).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FINAL_ANSWER_INSTRUCTION",
    "OPENAI_TOOL_KEYS",
    "WRAP_UP_INSTRUCTION",
    "add_text",
    "final_request",
    "reserve_final",
]

#: The instruction added to the final call.
WRAP_UP_INSTRUCTION = (
    "The budget for this task is nearly spent. Do not call any tool. Give your final answer now, "
    "as complete and useful as you can, and say briefly what is left undone."
)
#: The instruction's variant for a framework that ends a run through a ``final_answer`` tool
#: (smolagents): that tool stays, every other goes.
FINAL_ANSWER_INSTRUCTION = (
    "The budget for this task is nearly spent. Do not call any tool except final_answer: give your "
    "final answer now with final_answer, as complete and useful as you can, and say briefly what is "
    "left undone."
)
OPENAI_TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
#: The output-cap key the adapter writes -> the request shape it belongs to.
_SHAPES = {"max_completion_tokens": "chat", "max_output_tokens": "responses", "max_tokens": "anthropic"}


def _has_tool_blocks(messages: Any) -> bool:
    for message in messages or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            return True
    return False


def add_text(kwargs: dict[str, Any], cap_key: str, text: str) -> None:
    """Add ``text`` for the model to the request ``kwargs`` (changed in place; the caller's message
    list is copied) of the shape named by ``cap_key``: Responses after its ``instructions``; Chat
    Completions as a last user message; Anthropic joined to the last user turn (turns alternate),
    else as a new user message."""
    shape = _SHAPES.get(cap_key, "chat")
    if shape == "responses":
        given = kwargs.get("instructions")
        kwargs["instructions"] = f"{given}\n\n{text}" if given else text
        return
    messages = list(kwargs.get("messages") or [])
    last = messages[-1] if messages else None
    if shape == "anthropic" and isinstance(last, dict) and last.get("role") == "user":
        content = last.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        messages[-1] = {**last, "content": [*blocks, {"type": "text", "text": text}]}
    else:
        messages.append({"role": "user", "content": text})
    kwargs["messages"] = messages


def final_request(kwargs: dict[str, Any], cap_key: str, instruction: str = WRAP_UP_INSTRUCTION) -> None:
    """Rewrite ``kwargs`` (a request's keyword arguments, changed in place) into a final call for
    the shape named by ``cap_key`` (its output-cap key): no tools, ``instruction`` added
    (see :func:`add_text`)."""
    if _SHAPES.get(cap_key) == "anthropic":
        if _has_tool_blocks(kwargs.get("messages")) and kwargs.get("tools"):
            kwargs["tool_choice"] = {"type": "none"}  # the tool blocks need their definitions
        else:  # also OpenAI's keys: LiteLLM sends OpenAI-shaped requests capped by max_tokens
            for key in OPENAI_TOOL_KEYS:
                kwargs.pop(key, None)
    else:
        for key in OPENAI_TOOL_KEYS:
            kwargs.pop(key, None)
    add_text(kwargs, cap_key, instruction)


def reserve_final(
    guard: Any,
    kwargs: dict[str, Any],
    prompt_parts: tuple[Any, ...],
    cap_keys: tuple[str, ...],
    set_key: str,
    instruction: str = WRAP_UP_INSTRUCTION,
) -> Any:
    """Make ``kwargs`` the run's final call (:func:`final_request`, with ``instruction``) and
    reserve it with ``final=True``: the prompt (counted again, with the instruction) plus an output
    cap of the least of the request's own cap and the final call's output budget (at least 1).
    ``guard``: the adapter's :class:`budgetlens.guard.adapters._calls.CallGuard`. Raises
    BudgetExceeded when even the final call does not fit."""
    final_request(kwargs, set_key, instruction)
    prompt = guard.prompt_tokens(kwargs, (*prompt_parts, instruction))
    left = guard.run.output_budget(guard._ceiling, prompt, final=True)
    given = next((kwargs[k] for k in cap_keys if kwargs.get(k) is not None), None)
    cap = max(1, min(c for c in (given, left, guard._ceiling) if isinstance(c, int)))
    kwargs[next((k for k in cap_keys if kwargs.get(k) is not None), set_key)] = cap
    return guard.run.reserve(prompt + cap, kwargs.get("model"), output_tokens=cap, final=True)
