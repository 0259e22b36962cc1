"""A LangGraph agent under a hard budget: a callback handler (runs offline: a local server)."""

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from llm_server import LLMServer

from budgetlens import RunBudget
from budgetlens.guard.adapters import BudgetCallbackHandler


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return "def f(): ..."


def run_agent(base_url: str, task: str):
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="test", max_retries=0)
    graph = create_react_agent(llm, [read_file])
    with RunBudget(max_total_tokens=20_000, max_turns=10, task_type="code_fix") as run:
        budget = {"callbacks": [BudgetCallbackHandler(run)]}  # the budget's two lines
        graph.invoke({"messages": [("user", task)]}, config=budget)
    return run.result


if __name__ == "__main__":
    with LLMServer() as server:
        result = run_agent(server.openai_url, "Fix the failing test")
    print(result.stop_reason, result.turns, result.tool_calls, result.used_tokens)
