"""Which genai-prices entry prices a model name (``budgetlens.pricing``'s lookup, design §3).

Model names resolve as genai-prices matches them, then without provider and region prefixes
(``openai/``, ``bedrock/``, ``us.``, ``global.``, ``anthropic.``) and version or date suffixes
(``-2025-08-07``, ``-20250929``, ``-0315``, ``@20250514``, ``:0``, ``-v1:0``, ``-latest``): the
full (dated) name first, so a dated entry wins over its base model. Lookups are cached per
(model, provider); :func:`clear_names` forgets them.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

from budgetlens.config import ENV_PRICES_FILE

log = logging.getLogger("budgetlens.pricing")  # the price path's one logger (users filter on it)

__all__ = ["clear_names", "genai_model", "name_variants", "warn_unpriced"]

#: OTel gen_ai.provider.name values (and common spellings) -> genai-prices provider ids.
_PROVIDER_IDS = {
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "bedrock_converse": "aws",
    "converse": "aws",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "gemini": "google",
    "vertex_ai": "google",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "mistral_ai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
}
#: Version and date suffixes, stripped one at a time (the full name is always tried first).
_SUFFIXES = (
    re.compile(r"-v\d+(:\d+)?$"),  # Bedrock -v1:0
    re.compile(r":\d+$"),  # Bedrock :0
    re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|@latest|-latest|@\d{3})$"),
    re.compile(r"-\d{4}$"),  # OpenAI -0314 / -0613
)
#: Bedrock cross-region inference profiles and vendor prefixes (``us.anthropic.claude-...``).
_DOTTED_PREFIX = re.compile(
    r"^(?:(?:us|eu|apac|au|jp|ca|us-gov|global)\.)?"
    r"(?:anthropic|amazon|meta|mistral|cohere|ai21|openai|deepseek|qwen|writer)\."
)
_REGION_PREFIX = re.compile(r"^(?:us|eu|apac|au|jp|ca|us-gov|global)\.")


def name_variants(model: str) -> list[str]:
    """``model`` lower-cased, then without provider/region prefixes, then without suffixes."""
    name = model.strip().lower()
    names = [name]
    while "/" in name:
        name = name.split("/", 1)[1]
        names.append(name)
    for n in list(names):
        for pattern in (_DOTTED_PREFIX, _REGION_PREFIX):
            stripped = pattern.sub("", n)
            if stripped != n and stripped not in names:
                names.append(stripped)
    for n in list(names):
        for pattern in _SUFFIXES:
            stripped = pattern.sub("", n)
            if stripped != n and stripped not in names:
                names.append(stripped)
                n = stripped
    return names


def _provider_candidates(model: str, provider: str | None) -> list[str | None]:
    provider_id = _PROVIDER_IDS.get((provider or "").lower(), (provider or "").lower() or None)
    prefix = model.split("/", 1)[0].lower() if "/" in model else None
    prefix_id = _PROVIDER_IDS.get(prefix, prefix) if prefix else None
    return list(dict.fromkeys([provider_id, prefix_id, None]))


@lru_cache(maxsize=4096)
def genai_model(model: str, provider: str | None) -> tuple[Any, Any] | None:
    """(genai-prices Provider, ModelInfo) for ``model``, or None when it has no entry."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    for name in name_variants(model):
        for pid in _provider_candidates(model, provider):
            try:
                return snapshot.find_provider_model(name, None, pid, None)
            except LookupError:
                continue
    return None


_warned_unpriced: set[str] = set()


def warn_unpriced(model: str, provider: str | None) -> None:
    """Log once per (provider, model) at WARNING that the model has no price."""
    key = f"{provider or ''}/{model}"
    if key not in _warned_unpriced:
        _warned_unpriced.add(key)
        log.warning(
            "no price for model %r (provider %r): its calls are unpriced; add it to a price file (%s)",
            model,
            provider,
            ENV_PRICES_FILE,
        )


def clear_names() -> None:
    """Forget resolved model names and the models already warned about."""
    genai_model.cache_clear()
    _warned_unpriced.clear()
