"""Prompt size estimates for reservations, before a call is sent (no tokenizer needed).

A reservation must not be smaller than the call, or the limit is not hard: the estimate counts
one token per 3 characters of the request's text (JSON of messages, tools and instructions),
which is above what BPE tokenizers give for English prose and code (about 4 characters per
token), plus a few tokens per message for the chat format. Callers with a real tokenizer pass
their own count instead (``count_tokens=`` in :mod:`budgetlens.adapters`).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["CHARS_PER_TOKEN", "PER_MESSAGE_TOKENS", "estimate_tokens"]

#: Characters per token of the estimate (conservative: real tokenizers give ~4 for English).
CHARS_PER_TOKEN = 3
#: Tokens added per message for roles and separators.
PER_MESSAGE_TOKENS = 4


def _plain(value: Any) -> Any:
    """Pydantic models (SDK types) and other objects as JSON-able data; a model class (a
    structured-output ``response_format``) as its JSON schema, which is what the request sends."""
    if isinstance(value, type):
        schema = getattr(value, "model_json_schema", None)
        return schema() if callable(schema) else value.__name__
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    return str(value)


def estimate_tokens(*parts: Any) -> int:
    """An upper estimate (int, tokens >= 0) of the prompt made of ``parts``: strings count by
    length, anything else (messages, tools, content blocks) by the length of its JSON; lists of
    messages add :data:`PER_MESSAGE_TOKENS` each. None parts count 0."""
    chars, messages = 0, 0
    for part in parts:
        if part is None:
            continue
        if isinstance(part, str):
            chars += len(part)
            continue
        if isinstance(part, (list, tuple)):
            messages += len(part)
        chars += len(json.dumps(part, default=_plain, ensure_ascii=False))
    return math.ceil(chars / CHARS_PER_TOKEN) + PER_MESSAGE_TOKENS * messages
