"""A span's attribution columns (``budgetlens.attribution``) from its allow-listed attributes
and its resource's: ``team``, ``user_id``, ``session_id``, ``tags`` (and ``service_name`` when a
``budgetlens.service`` says so), each from the span first (``ATTRIBUTION_SOURCES``). Used by
``budgetlens.otlp.mapping``; pure.
"""

from __future__ import annotations

from budgetlens.attribution import MAX_TAGS, MAX_VALUE_CHARS, TAG_KEY, tags_json
from budgetlens.otlp.attributes import ALLOWED_ATTRIBUTES, ATTRIBUTION_SOURCES, TAG_PREFIX, first_text

__all__ = ["attribution", "names_attribution"]


def attribution(attrs: dict, resource: dict | None = None) -> dict:
    """The attribution columns (``service_name`` only when a ``budgetlens.service`` says so,
    ``team``, ``user_id``, ``session_id``, ``tags`` as JSON) of a span's allow-listed
    attributes, each from the span first, else from its resource's (``resource``); None where
    neither has one. Tags of span and resource merge (the span's win), at most ``MAX_TAGS``
    (the smallest keys), keys as ``budgetlens.attribution.TAG_KEY`` (others are dropped),
    values cut to 200 characters. Raises SpanRejected for a non-scalar value."""
    out: dict = {}
    for column, keys in ATTRIBUTION_SOURCES:
        value = first_text(attrs, *keys)
        if value is None and resource:
            value = first_text(resource, *keys)
        out[column] = value
    tags = {}
    for source in (resource or {}, attrs):
        for key, value in source.items():
            if key.startswith(TAG_PREFIX) and type(value) is str:
                name = key[len(TAG_PREFIX) :]
                if TAG_KEY.fullmatch(name):
                    tags[name] = value[:MAX_VALUE_CHARS]
    if len(tags) > MAX_TAGS:
        tags = {k: tags[k] for k in sorted(tags)[:MAX_TAGS]}
    out["tags"] = tags_json(tags)
    return out


_ATTRIBUTION_KEYS = frozenset(key for _, keys in ATTRIBUTION_SOURCES for key in keys)


def names_attribution(attrs: dict) -> bool:
    """True when a span's allow-listed attributes (``read_attributes``) hold an attribution
    key or a tag: else its ``attribution`` is its resource's (``attribution({}, resource)``)."""
    return not _ATTRIBUTION_KEYS.isdisjoint(attrs) or not ALLOWED_ATTRIBUTES.issuperset(attrs)
