"""An Anthropic-style tool loop under a hard budget (runs as is: the client is a fake)."""

from types import SimpleNamespace

from budgetlens import BudgetExceeded, RunBudget


class FakeAnthropic:
    """Stands in for anthropic.Anthropic(): uses a tool until the turn limit stops it."""

    def __init__(self):
        self.calls = 0
        self.messages = SimpleNamespace(create=self._create)

    def _create(self, model, max_tokens, messages, tools=None):
        self.calls += 1
        block = SimpleNamespace(
            type="tool_use", id=f"toolu_{self.calls}", name="bash", input={"command": "ls"}
        )
        usage = SimpleNamespace(
            input_tokens=12,
            output_tokens=90,
            cache_creation_input_tokens=2_000 if self.calls == 1 else 0,
            cache_read_input_tokens=0 if self.calls == 1 else 2_000 * self.calls,
        )
        return SimpleNamespace(model=model, stop_reason="tool_use", content=[block], usage=usage)


def run_agent(client, task):
    events = []
    run = RunBudget(
        max_total_tokens=30_000,
        max_turns=4,
        task_type="code_fix",
        provider="anthropic",
        on_event=events.append,
    )
    messages = [{"role": "user", "content": task}]
    try:
        while True:
            run.before_turn()
            reservation = run.reserve(1_024 + 8_000)  # max_tokens + prompt estimate
            response = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=1_024, messages=messages, tools=[{"name": "bash"}]
            )
            run.record(response.usage, model=response.model, reservation=reservation)
            tool_uses = [b for b in response.content if b.type == "tool_use"]
            if response.stop_reason != "tool_use":
                break
            results = []
            for block in tool_uses:
                run.before_tool_call(block.name)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": "ok"})
            messages += [
                {"role": "assistant", "content": response.content},
                {"role": "user", "content": results},
            ]
        result = run.finish()
    except BudgetExceeded as stop:
        result = run.finish(stop_reason=stop.reason)
    print(run.stats().status, [e.name for e in events])
    return result


if __name__ == "__main__":
    result = run_agent(FakeAnthropic(), "Fix the failing test")
    print(result.stop_reason, result.turns, result.tool_calls, result.used_tokens)
