"""An OpenAI Agents SDK agent under a hard budget: run hooks (runs offline: a local server)."""

import asyncio

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from llm_server import LLMServer
from openai import AsyncOpenAI

from budgetlens import RunBudget
from budgetlens.guard.adapters import BudgetRunHooks


@function_tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


async def run_agent(base_url: str, task: str):
    model = OpenAIResponsesModel("gpt-4o-mini", AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0))
    agent = Agent(name="fixer", instructions="Fix the bug.", tools=[read_file], model=model)
    with RunBudget(max_total_tokens=20_000, max_tool_calls=5, task_type="code_fix") as run:
        await Runner.run(agent, task, hooks=BudgetRunHooks(run))  # the budget's two lines
    return run.result


if __name__ == "__main__":
    set_tracing_disabled(True)  # offline: no trace upload
    with LLMServer() as server:
        result = asyncio.run(run_agent(server.openai_url, "Fix the failing test"))
    print(result.stop_reason, result.turns, result.tool_calls, result.used_tokens)
