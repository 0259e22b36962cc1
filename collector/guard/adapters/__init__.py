"""Drop-in adapters: a hard budget for agents built on the SDKs they already use.

- :func:`wrap_openai` (``budgetlens.guard.adapters.openai_client``): an ``OpenAI`` /
  ``AsyncOpenAI`` client whose Chat Completions and Responses calls (plain and streamed) reserve,
  record and raise ``BudgetExceeded`` before a call that does not fit. Extra ``openai``.
- :func:`wrap_anthropic` (``anthropic_client``): the same for ``Anthropic`` /
  ``AsyncAnthropic`` Messages. Extra ``anthropic``.
- :class:`BudgetRunHooks` (``openai_agents``): run hooks for the OpenAI Agents SDK. Extra
  ``agents``.
- :class:`BudgetCallbackHandler` (``langchain``): a LangChain / LangGraph callback handler;
  :func:`guard_chat_model` a chat model that carries it and asks for stream usage. Extra
  ``langchain``.
- ``CrewBudget`` (``budgetlens.guard.adapters.crewai``): CrewAI's model and tool hooks, usage from
  its event bus (``with CrewBudget(run): crew.kickoff()``). Extra ``crewai``; the other
  frameworks' adapters are listed in docs/adapters.md.

- :class:`UnguardedCallError`: raised by a wrapped client for a model call it cannot guard
  (naming the method); nothing is sent.

Each name is imported on first use, so ``import budgetlens`` loads no SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from budgetlens.guard.adapters._refuse import UnguardedCallError
    from budgetlens.guard.adapters.anthropic_client import wrap_anthropic
    from budgetlens.guard.adapters.langchain import BudgetCallbackHandler, guard_chat_model
    from budgetlens.guard.adapters.openai_agents import BudgetRunHooks
    from budgetlens.guard.adapters.openai_client import wrap_openai

__all__ = [
    "BudgetCallbackHandler",
    "BudgetRunHooks",
    "UnguardedCallError",
    "guard_chat_model",
    "wrap_anthropic",
    "wrap_openai",
]

_HOMES = {
    "wrap_openai": "openai_client",
    "wrap_anthropic": "anthropic_client",
    "BudgetRunHooks": "openai_agents",
    "BudgetCallbackHandler": "langchain",
    "UnguardedCallError": "_refuse",
    "guard_chat_model": "langchain",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'budgetlens.guard.adapters' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
