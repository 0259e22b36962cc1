"""What the adapter tests share: one call's usage as the local server (tests/examples/llm_server.py)
reports it, the requests they send it, and the real OpenAI and Anthropic clients pointed at it."""

from __future__ import annotations

from llm_server import CACHED_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS

from budgetlens import Usage

#: One call's usage as the server reports it, in the guard's shape (computed from the server's
#: constants: OpenAI totals include cache and reasoning; Anthropic reports input without cache).
CALL = Usage(INPUT_TOKENS, OUTPUT_TOKENS, cache_read_tokens=CACHED_TOKENS, reasoning_tokens=REASONING_TOKENS)
ANTHROPIC_CALL = Usage(INPUT_TOKENS, OUTPUT_TOKENS, cache_read_tokens=CACHED_TOKENS)
#: The conversation a request sends.
MESSAGES = [{"role": "user", "content": "Fix the failing test"}]
#: One tool offered, in the Chat Completions and the Anthropic Messages shape.
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
ANTHROPIC_TOOLS = [{"name": "read_file", "input_schema": {"type": "object"}}]


def openai_client(server, run, is_async=False):
    """An ``OpenAI`` (``AsyncOpenAI``) client of the local server, without retries, guarded by ``run``."""
    import openai

    from budgetlens.guard.adapters import wrap_openai

    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return wrap_openai(cls(base_url=server.openai_url, api_key="test", max_retries=0), run)


def anthropic_client(server, run, is_async=False):
    """An ``Anthropic`` (``AsyncAnthropic``) client of the local server, without retries, guarded by
    ``run``."""
    import anthropic

    from budgetlens.guard.adapters import wrap_anthropic

    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    return wrap_anthropic(cls(base_url=server.anthropic_url, api_key="test", max_retries=0), run)
