"""SDK methods an adapter cannot guard: refused with an error that names the method and says how
to guard the call, never passed through unguarded (issue 20)."""

from __future__ import annotations

from typing import Any

__all__ = ["Refused", "UnguardedCallError"]


class UnguardedCallError(RuntimeError):
    """Raised when code calls an SDK method through a guarded client that the adapter cannot put
    under the budget (a Batch job billed later, a raw HTTP response, a realtime session, ...).
    ``method``: its dotted path on the client (``"batches.create"``); the message says how to
    guard it. Nothing was sent."""

    def __init__(self, method: str, hint: str) -> None:
        self.method, self.hint = method, hint
        super().__init__(f"{method} is not guarded by budgetlens and was not sent: {hint}")


class Refused:
    """Stands for an unguarded SDK resource: attribute access works (``hasattr`` and
    introspection keep working), calling anything raises :class:`UnguardedCallError`."""

    def __init__(self, path: str, hint: str) -> None:
        self._path, self._hint = path, hint

    def __getattr__(self, name: str) -> Refused:
        if name.startswith("__"):
            raise AttributeError(name)
        return Refused(f"{self._path}.{name}", self._hint)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise UnguardedCallError(self._path, self._hint)

    def __repr__(self) -> str:
        return f"<unguarded {self._path}: calling it raises UnguardedCallError>"


#: The hint for ``with_raw_response`` / ``with_streaming_response``.
RAW_HINT = (
    "call the method itself on the guarded client (it returns the parsed response), or guard it by "
    "hand: res = run.reserve(...) before, run.record(usage, model, reservation=res) after"
)
#: The hint for work billed later or outside a request/response (batches, realtime, assistants).
BY_HAND_HINT = (
    "its usage is not in the response of the call; guard it by hand (run.reserve before, run.record "
    "with the usage the job reports after), or use the plain SDK client outside the budget"
)
