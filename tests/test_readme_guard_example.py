"""The README's "guard in ten lines" runs as written (against the offline test server, the
OpenAI SDK configured from the environment), and the --limit help names int64's maximum."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest
from conftest import require

from budgetlens import Action
from budgetlens.cli._common import non_negative_int

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.system  # runs the README's example in a fresh interpreter: seconds
def test_the_ten_line_guard_example_runs_as_written(monkeypatch):
    require("openai")  # the example says it needs it: pip install "budgetlens[openai]"
    sys.path.insert(0, str(Path(__file__).parent / "examples"))
    from llm_server import LLMServer

    section = README.read_text().split("## The guard in ten lines", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "client = " in code and "messages = " in code and "from openai import OpenAI" in code
    with LLMServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)
    assert namespace["action"] is Action.CONTINUE  # the README lists it
    assert namespace["result"].stop_reason == "completed"
    assert "`CONTINUE`" in README.read_text()


def test_the_limit_help_names_int64s_maximum():
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        non_negative_int(str(2**63))
    assert f"<= {2**63 - 1}," in str(raised.value)
    assert non_negative_int(str(2**63 - 1)) == 2**63 - 1
