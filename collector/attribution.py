"""Who a run belongs to (issue 19): service, team, user, session and free tags, defined once.

The guard takes them as ``RunBudget(service=, team=, user=, session_id=, tags=)`` and emits them
on the run span under ``budgetlens.*``; the collector reads them from spans and resources (see
``budgetlens.otlp.attributes.ATTRIBUTION_SOURCES``); the store keeps them as the ``team``,
``user_id``, ``session_id`` and ``tags`` columns (``service_name`` already existed); the analysis
filters on them; a ``SpendTracker``/``TokenPool`` with a ``scope`` applies only to runs whose
attribution matches it.

Decisions (documented in docs/attribution.md):

- ``tenant`` and ``team`` are one field, ``team``: ``tenant=`` and ``budgetlens.tenant`` are
  accepted as its other name (giving both with different values is an error).
- ``tags`` is a mapping of string keys to string values: at most :data:`MAX_TAGS` entries, keys
  of 1-64 characters from ``A-Z a-z 0-9 _ . : -``, values of at most :data:`MAX_VALUE_CHARS`
  characters. Stored as a JSON object with sorted keys (NULL when there is none).
- ``service``, ``team``, ``user``, ``session_id``: non-empty strings of at most
  :data:`MAX_VALUE_CHARS` characters, or None.

Imports only the standard library (the guard must stay light).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ATTRIBUTION_ARGS",
    "ATTRIBUTION_COLUMNS",
    "MAX_TAGS",
    "MAX_VALUE_CHARS",
    "SCOPE_KEYS",
    "Attribution",
    "check_scope",
    "check_tags",
    "check_value",
    "parse_tag_filter",
    "tags_json",
]

#: Largest number of tags on one run.
MAX_TAGS = 16
#: Longest attribution value (characters), as every other stored text.
MAX_VALUE_CHARS = 200
#: The rule of a tag key.
TAG_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: The store columns of the attribution beyond ``service_name`` (runs, run_records, model_calls).
ATTRIBUTION_COLUMNS: tuple[str, ...] = ("team", "user_id", "session_id", "tags")
#: Keys a ledger scope may name (``tenant`` = ``team``); any other key names a tag.
SCOPE_KEYS = ("service", "team", "tenant", "user", "session_id")
#: The keyword arguments of :meth:`Attribution.build` (and of ``RunBudget``, which passes them on).
ATTRIBUTION_ARGS = (*SCOPE_KEYS, "tags")


def check_value(name: str, value: Any) -> str | None:
    """``value`` when it is None or a non-empty str of at most ``MAX_VALUE_CHARS`` characters.
    Raises ValueError naming ``name`` and the rule otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS:
        raise ValueError(
            f"{name} must be a non-empty string of at most {MAX_VALUE_CHARS} characters or None, "
            f"got {str(value)[:40]!r}"
        )
    return value


def check_tags(tags: Any, name: str = "tags") -> dict[str, str]:
    """``tags`` as a dict (sorted by key): a mapping of at most ``MAX_TAGS`` entries, keys
    matching ``TAG_KEY``, values strings of at most ``MAX_VALUE_CHARS`` characters. None is no
    tag. Raises ValueError naming ``name``, the key and the rule."""
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise ValueError(f"{name} must be a mapping of tag name -> string value, got {tags!r}"[:200])
    if len(tags) > MAX_TAGS:
        raise ValueError(f"{name}: at most {MAX_TAGS} tags, got {len(tags)}")
    out = {}
    for key in sorted(tags, key=str):
        value = tags[key]
        if not isinstance(key, str) or not TAG_KEY.fullmatch(key):
            raise ValueError(f"{name}: key {str(key)[:70]!r} must be 1-64 characters of A-Z a-z 0-9 _ . : -")
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
            raise ValueError(
                f"{name}[{key!r}] must be a string of at most {MAX_VALUE_CHARS} characters, "
                f"got {str(value)[:40]!r}"
            )
        out[key] = value
    return out


def check_scope(scope: Any) -> dict[str, str] | None:
    """A budget's ``scope`` (``SpendTracker``/``TokenPool``): None (every run) or a non-empty
    mapping of attribution keys (:data:`SCOPE_KEYS`, else a tag name) to values, e.g.
    ``{"team": "search-infra"}``; ``tenant`` is read as ``team``. Returns it as a dict sorted by
    key. Raises ValueError naming the key and the rule (keys and values: non-empty strings
    without ``|``, ``,`` or ``=``, so the scope also names a shared ledger's account)."""
    if scope is None:
        return None
    if not isinstance(scope, Mapping) or not scope:
        raise ValueError(
            f"scope must be None or a non-empty mapping of attribution key -> value, got {scope!r}"
        )
    out = {}
    for key in sorted(scope, key=str):
        value = scope[key]
        for part in (key, value):
            if not isinstance(part, str) or not part or any(c in part for c in "|,="):
                raise ValueError(
                    f"scope {key!r}: keys and values must be non-empty strings without '|', ',' "
                    f"or '=', got {part!r}"
                )
        out["team" if key == "tenant" else key] = value
    return out


def tags_json(tags: Mapping[str, str] | None) -> str | None:
    """The stored form of tags: a compact JSON object with sorted keys; None when empty."""
    if not tags:
        return None
    return json.dumps(dict(sorted(tags.items())), separators=(",", ":"), ensure_ascii=False)


def parse_tag_filter(text: str) -> tuple[str, str]:
    """A ``--tag`` filter ``key=value`` as (key, value). Raises ValueError naming the rule."""
    key, sep, value = text.partition("=")
    if not sep or not TAG_KEY.fullmatch(key):
        raise ValueError(
            f"--tag must be key=value with a key of 1-64 characters of A-Z a-z 0-9 _ . : -, got {text!r}"
        )
    return key, value


@dataclass(frozen=True)
class Attribution:
    """Who a run belongs to: ``service``, ``team`` (= tenant), ``user``, ``session_id`` (str or
    None) and ``tags`` (dict str -> str). Build it with :meth:`build`, which checks every
    field."""

    service: str | None = None
    team: str | None = None
    user: str | None = None
    session_id: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        service: Any = None,
        team: Any = None,
        tenant: Any = None,
        user: Any = None,
        session_id: Any = None,
        tags: Any = None,
    ) -> Attribution:
        """Check the fields (``tenant`` is ``team``'s other name). Raises ValueError naming the
        field and the rule, also when ``team`` and ``tenant`` disagree."""
        team = check_value("team", team)
        tenant = check_value("tenant", tenant)
        if team is not None and tenant is not None and team != tenant:
            raise ValueError(f"team and tenant are one field; got team={team!r} and tenant={tenant!r}")
        return cls(
            service=check_value("service", service),
            team=team if team is not None else tenant,
            user=check_value("user", user),
            session_id=check_value("session_id", session_id),
            tags=check_tags(tags),
        )

    def value(self, key: str) -> str | None:
        """The value a scope key names: ``service``, ``team``/``tenant``, ``user``,
        ``session_id``, else the tag ``key`` (a ``tag.`` prefix is optional)."""
        if key == "tenant":
            key = "team"
        if key in SCOPE_KEYS:
            value: str | None = getattr(self, key)
            return value
        return self.tags.get(key.removeprefix("tag."))

    def matches(self, scope: Mapping[str, str] | None) -> bool:
        """True when every ``key: value`` of ``scope`` is this run's (None or empty: every run)."""
        return not scope or all(self.value(k) == v for k, v in scope.items())
