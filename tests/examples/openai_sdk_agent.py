"""An agent on the OpenAI SDK under a hard budget: two lines added (runs offline: a local server)."""

from llm_server import LLMServer
from openai import OpenAI

from budgetlens import RunBudget
from budgetlens.guard.adapters import wrap_openai


def run_agent(base_url: str, task: str):
    with RunBudget(max_total_tokens=20_000, max_turns=10, task_type="code_fix") as run:
        client = wrap_openai(OpenAI(base_url=base_url, api_key="test", max_retries=0), run)  # + 2 lines
        tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
        messages = [{"role": "user", "content": task}]
        while True:  # an ordinary tool loop: nothing else knows about the budget
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                run.before_tool_call(call.function.name)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "def f(): ..."})
    return run.result


if __name__ == "__main__":
    with LLMServer() as server:
        result = run_agent(server.openai_url, "Fix the failing test")
    print(result.stop_reason, result.turns, result.tool_calls, result.used_tokens)
