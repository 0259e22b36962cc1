"""A thin attribute proxy: the wrapped SDK object's other attributes pass through unchanged."""

from __future__ import annotations

from typing import Any


class Proxy:
    """Wraps ``target``; attributes not defined on the subclass come from ``target``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)
