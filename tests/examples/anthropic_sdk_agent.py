"""An agent on the Anthropic SDK under a hard budget, streamed (runs offline: a local server)."""

from anthropic import Anthropic
from llm_server import LLMServer

from budgetlens import BudgetExceeded, RunBudget
from budgetlens.guard.adapters import wrap_anthropic


def run_agent(base_url: str, task: str, max_total_tokens: int = 4_000):
    run = RunBudget(max_total_tokens=max_total_tokens, task_type="research")
    client = wrap_anthropic(Anthropic(base_url=base_url, api_key="test", max_retries=0), run)
    messages = [{"role": "user", "content": task}]
    try:
        while True:
            with client.messages.stream(
                model="claude-haiku-4-5", max_tokens=1_024, messages=messages
            ) as stream:
                text = stream.get_final_text()
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
    except BudgetExceeded as stop:  # raised before the call that would not fit
        print("stopped before the call:", stop)
    return run.finish()


if __name__ == "__main__":
    with LLMServer() as server:
        result = run_agent(server.anthropic_url, "Summarize the findings")
    print(result.stop_reason, result.turns, result.used_tokens)
