"""Lines of agent transcripts the importer tests write (Claude Code JSONL)."""

from __future__ import annotations


def claude_assistant(
    session: str,
    ts: str,
    message_id: str,
    request_id: str,
    inp: int,
    out: int,
    cache_read: int | None = None,
) -> dict:
    """One Claude Code ``assistant`` line of session ``session`` at ``ts`` (ISO 8601): a response
    ``message_id`` to request ``request_id`` with ``inp`` input and ``out`` output tokens, and
    ``cache_read`` cache-read tokens when given."""
    usage = {"input_tokens": inp, "output_tokens": out}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    return {
        "type": "assistant",
        "sessionId": session,
        "timestamp": ts,
        "cwd": "/work/shop",
        "requestId": request_id,
        "message": {
            "id": message_id,
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "ok"}],
            "usage": usage,
        },
    }
