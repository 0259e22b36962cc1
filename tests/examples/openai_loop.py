"""An OpenAI-style tool loop under a hard budget (runs as is: the client is a fake)."""

from types import SimpleNamespace

from budgetlens import Action, BudgetExceeded, RunBudget


class FakeOpenAI:
    """Stands in for openai.OpenAI(): asks for a tool twice, then answers."""

    def __init__(self):
        self.calls = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, model, messages, tools=None):
        self.calls += 1
        if self.calls < 3:
            call = SimpleNamespace(
                id=f"call_{self.calls}",
                type="function",
                function=SimpleNamespace(name="search", arguments='{"q": "x"}'),
            )
            message = SimpleNamespace(role="assistant", content=None, tool_calls=[call])
        else:
            message = SimpleNamespace(role="assistant", content="done", tool_calls=None)
        usage = {
            "prompt_tokens": 1200 * self.calls,
            "completion_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 1024 if self.calls > 1 else 0},
            "completion_tokens_details": {"reasoning_tokens": 64},
        }
        return SimpleNamespace(model=model, choices=[SimpleNamespace(message=message)], usage=usage)


def run_agent(client, task):
    messages = [{"role": "user", "content": task}]
    with RunBudget(
        max_total_tokens=20_000,
        max_turns=8,
        max_tool_calls=10,
        task_type="research",
        provider="openai",
        model_chain=("gpt-4o", "gpt-4o-mini"),
    ) as run:
        try:
            while True:
                if run.before_turn() is Action.SUMMARIZE:
                    messages = messages[:1] + messages[-2:]  # compress the context
                reservation = run.reserve(4_000)  # estimated input + output tokens
                try:
                    response = client.chat.completions.create(
                        model=run.model, messages=messages, tools=[{"type": "function"}]
                    )
                except Exception:
                    run.release(reservation)  # nothing was spent
                    raise
                run.record(response.usage, model=run.model, reservation=reservation)
                message = response.choices[0].message
                if not message.tool_calls:
                    break
                messages.append({"role": "assistant", "tool_calls": message.tool_calls})
                for call in message.tool_calls:
                    run.before_tool_call(call.function.name)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": "result"})
        except BudgetExceeded as stop:
            print(f"stopped by the budget: {stop.reason}")
        print(run.stats().status)
    return run.result


if __name__ == "__main__":
    result = run_agent(FakeOpenAI(), "Find the answer")
    print(result.stop_reason, result.turns, result.tool_calls, result.used_tokens)
