"""A hard budget for Google ADK agents (extra ``google-adk``): a runner plugin over ADK's model
and tool callbacks.

``plugin = BudgetPlugin(run)``; ``InMemoryRunner(agent, plugins=[plugin])`` (any ``Runner``):

- ``before_model_callback`` reserves the prompt estimate (contents, system instruction, tools)
  plus the request's ``max_output_tokens`` (else the budget's output left, at most
  ``max_output_tokens``, written into the request's config; for ADK's ``LiteLlm`` only when the
  request sets ``temperature``, as ADK 1.x drops the parameters otherwise) and refuses a request
  that does not fit before it is sent: ADK re-raises a plugin's exception as ``RuntimeError``
  whose ``__cause__`` is the ``BudgetExceeded`` (``with RunBudget(...)`` records the budget stop);
- ``after_model_callback`` records the response's ``usage_metadata`` (Gemini's shape: thinking
  and tool-use prompt counted, cache a part of the prompt); in streaming mode partial chunks are
  skipped and the final one recorded; a response without usage is *unknown*, charged its
  reservation;
- ``on_model_error_callback``: an error with an HTTP status (``code`` / ``status_code``) releases
  the reservation, any other is recorded as unknown, charged;
- with a wrap-up slice (``RunBudget(wrap_up_tokens=...)``), a request that does not fit next to
  it becomes the run's final call: tools removed, the instruction to answer now added as a last
  user turn, ``max_output_tokens`` capped to the slice; the run then stops with ``budget_wrap_up``;
- ``before_tool_callback`` counts each tool call against ``max_tool_calls`` before it runs;
- sub-agents: agents of ``sub_agents`` run in the same invocation (the plugin sees them); an
  ``AgentTool`` runs its agent in a runner of its own. Newer ADK releases hand that runner the
  caller's plugins (the plugin then sees the calls itself); older ones do not, so the plugin also
  adds its model and tool callbacks to that agent when the tool starts, and they step aside
  whenever the plugin runs in the same invocation: each call is charged once (a failed call in a
  runner without the plugin is charged when the run finishes).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin

from budgetlens.guard.adapters._calls import DEFAULT_MAX_OUTPUT_TOKENS, CallGuard
from budgetlens.guard.adapters._wrap_up import WRAP_UP_INSTRUCTION
from budgetlens.guard.estimate import estimate_tokens
from budgetlens.usage import normalize_usage

__all__ = ["BudgetPlugin"]


def _can_cap(callback_context: Any, config: Any) -> bool:
    """Whether ``max_output_tokens`` can be added to the request: ADK 1.x's ``LiteLlm`` drops
    the generation parameters (and fails) when ``temperature`` is unset, so there the cap is only
    reserved, not sent."""
    from google.adk.models.lite_llm import LiteLlm

    agent = getattr(getattr(callback_context, "_invocation_context", None), "agent", None)
    try:
        model = getattr(agent, "canonical_model", None)
    except Exception:  # an agent whose model cannot be resolved: ADK raises when it is called
        model = None
    return not isinstance(model, LiteLlm) or getattr(config, "temperature", None) is not None


def _key(context: Any) -> tuple[str, str]:
    return (str(getattr(context, "invocation_id", "")), str(getattr(context, "agent_name", "")))


class BudgetPlugin(BasePlugin):
    """Puts ``run`` (a ``RunBudget``) around every model and tool call of an ADK runner (see
    the module doc). ``max_output_tokens`` caps requests that set none; ``provider`` names the
    ``gen_ai.provider.name`` (default ``gcp.gemini``)."""

    def __init__(
        self,
        run: Any,
        *,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        provider: str = "gcp.gemini",
        name: str = "budgetlens",
    ) -> None:
        super().__init__(name=name)
        self.run = run
        self._guard = CallGuard(run, provider, None, max_output_tokens)
        self._open: dict[tuple[str, str], deque] = {}

    def reserve(self, callback_context: Any, llm_request: Any) -> None:
        """Reserve one model request (raises BudgetExceeded before it is sent)."""
        config = getattr(llm_request, "config", None)
        tools = getattr(config, "tools", None)
        system = getattr(config, "system_instruction", None)
        prompt = estimate_tokens(system, list(getattr(llm_request, "contents", None) or ()), tools)
        given = getattr(config, "max_output_tokens", None)
        cap = self._guard.output_cap(prompt, given)
        model = getattr(llm_request, "model", None)
        if self.run.wrap_up_due(prompt + cap, model, output_tokens=cap):
            res = self._final(callback_context, llm_request, given)
        else:
            if given is None and config is not None and _can_cap(callback_context, config):
                config.max_output_tokens = cap
            res = self.run.reserve(prompt + cap, model, output_tokens=cap)
        self._open.setdefault(_key(callback_context), deque()).append(res)

    def _final(self, callback_context: Any, llm_request: Any, given: Any) -> Any:
        """Make ``llm_request`` the run's final call from its wrap-up slice (see
        :mod:`budgetlens.guard.adapters._wrap_up`): tools removed, :data:`WRAP_UP_INSTRUCTION` added
        as a last user turn, ``max_output_tokens`` capped to the slice (where it can be sent, see
        :func:`_can_cap`); reserved with ``final=True`` (BudgetExceeded when even that does not fit)."""
        from google.genai import types

        config = getattr(llm_request, "config", None)
        if config is not None:
            config.tools = None
            config.tool_config = None
        if isinstance(getattr(llm_request, "tools_dict", None), dict):
            llm_request.tools_dict = {}
        contents = list(getattr(llm_request, "contents", None) or ())
        contents.append(types.Content(role="user", parts=[types.Part(text=WRAP_UP_INSTRUCTION)]))
        llm_request.contents = contents
        system = getattr(config, "system_instruction", None)
        prompt = estimate_tokens(system, contents)
        ceiling = self._guard._ceiling
        left = self.run.output_budget(ceiling, prompt, final=True)
        cap = max(1, min(c for c in (given, left, ceiling) if isinstance(c, int) and not isinstance(c, bool)))
        if config is not None and (given is not None or _can_cap(callback_context, config)):
            config.max_output_tokens = cap
        return self.run.reserve(
            prompt + cap, getattr(llm_request, "model", None), output_tokens=cap, final=True
        )

    def _take(self, callback_context: Any) -> Any:
        queue = self._open.get(_key(callback_context))
        return queue.popleft() if queue else None

    def record(self, callback_context: Any, llm_response: Any) -> None:
        """Record the final response of a model request (partial stream chunks are skipped)."""
        if getattr(llm_response, "partial", False):
            return
        res = self._take(callback_context)
        if res is None:
            return
        raw = getattr(llm_response, "usage_metadata", None)
        usage = normalize_usage(raw.model_dump(exclude_none=True), "gcp.gemini") if raw is not None else None
        model = getattr(llm_response, "model_version", None)
        self._guard.record(res, usage, model if isinstance(model, str) else None)

    def failed(self, callback_context: Any, error: BaseException) -> None:
        """Settle the reservation of a request that raised."""
        res = self._take(callback_context)
        if res is None:
            return
        self._guard.failed(res, error)

    def count_tool(self, tool: Any) -> None:
        """Count one tool call; attach the budget to an ``AgentTool``'s agent."""
        self.run.before_tool_call(str(getattr(tool, "name", type(tool).__name__)))
        sub = getattr(tool, "agent", None)
        if sub is not None and hasattr(sub, "before_model_callback"):
            _attach(sub, self)

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Any:
        self.reserve(callback_context, llm_request)
        return None

    async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> Any:
        self.record(callback_context, llm_response)
        return None

    async def on_model_error_callback(
        self, *, callback_context: Any, llm_request: Any, error: Exception
    ) -> Any:
        self.failed(callback_context, error)
        return None

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> Any:
        self.count_tool(tool)
        return None


def _runs_in(plugin: BudgetPlugin, context: Any) -> bool:
    """True when ``plugin`` is one of the plugins of ``context``'s invocation (ADK then calls it
    itself, and the agent's own copies of its callbacks must not charge the call again)."""
    manager = getattr(getattr(context, "_invocation_context", None), "plugin_manager", None)
    return any(p is plugin for p in getattr(manager, "plugins", None) or ())


def _as_list(callbacks: Any) -> list:
    return [] if callbacks is None else list(callbacks) if isinstance(callbacks, list) else [callbacks]


def _attach(agent: Any, plugin: BudgetPlugin) -> None:
    """Add ``plugin``'s model and tool steps to ``agent``'s own callbacks (once), and to its
    sub-agents'."""
    if any(getattr(cb, "budgetlens_plugin", None) is plugin for cb in _as_list(agent.before_model_callback)):
        return

    def before_model(callback_context: Any, llm_request: Any) -> None:
        if not _runs_in(plugin, callback_context):
            plugin.reserve(callback_context, llm_request)

    def after_model(callback_context: Any, llm_response: Any) -> None:
        if not _runs_in(plugin, callback_context):
            plugin.record(callback_context, llm_response)

    def before_tool(tool: Any, args: Any, tool_context: Any) -> None:
        if not _runs_in(plugin, tool_context):
            plugin.count_tool(tool)

    before_model.budgetlens_plugin = plugin  # type: ignore[attr-defined]
    agent.before_model_callback = [before_model, *_as_list(agent.before_model_callback)]
    agent.after_model_callback = [after_model, *_as_list(agent.after_model_callback)]
    agent.before_tool_callback = [before_tool, *_as_list(agent.before_tool_callback)]
    for sub in getattr(agent, "sub_agents", None) or ():
        _attach(sub, plugin)
