"""The README documents every CLI command, environment variable, public name and telemetry name,
and its examples are the files the tests run."""

from __future__ import annotations

import re
from pathlib import Path

import budgetlens
from budgetlens import config, semconv
from budgetlens.cli import build_parser

_ROOT = Path(__file__).resolve().parent.parent
#: The README first, then every page of docs/ (the reference lives there, linked from the README).
README = "\n".join(p.read_text() for p in [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))])


def _subcommands() -> list[str]:
    parser = build_parser()
    for action in parser._actions:  # argparse keeps subparsers here
        if getattr(action, "choices", None) and isinstance(action.choices, dict):
            return sorted(action.choices)
    raise AssertionError("budgetlens has no subcommands")


def test_first_lines_give_the_demo_and_the_test_command():
    head = "\n".join(README.splitlines()[:25])
    assert "budgetlens demo" in head
    assert "bash .ci/test" in head


def test_ci_runs_the_readme_test_command():
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert "bash .ci/test" in ci


def test_every_cli_command_is_in_the_readme():
    commands = _subcommands()
    assert {"demo", "collector", "dashboard", "import", "sample", "baselines", "presets", "runs"} <= set(
        commands
    )
    missing = [name for name in commands if f"budgetlens {name}" not in README]
    assert not missing, f"README does not show: {missing}"


def test_every_environment_variable_is_in_the_readme():
    names = [value for key, value in vars(config).items() if key.startswith("ENV_")]
    assert "BUDGETLENS_DB" in names
    missing = [name for name in names if name not in README]
    assert not missing, f"README does not list: {missing}"


def test_every_public_name_is_in_the_readme():
    missing = [name for name in budgetlens.__all__ if name not in README]
    assert not missing, f"README does not mention: {missing}"


def test_every_budget_attribute_and_event_name_is_in_the_readme():
    names = [
        value
        for key, value in vars(semconv).items()
        if not key.startswith("__") and isinstance(value, str) and value.startswith("budgetlens.")
    ]
    missing = [name for name in names if f"`{name}`" not in README]
    assert not missing, f"README does not list: {missing}"


def test_readme_examples_are_the_files_the_tests_run():
    blocks = re.findall(r"<!-- example: (\S+) -->\s*```python\n(.*?)```", README, re.S)
    assert blocks, "README has no marked examples"
    root = Path(__file__).resolve().parent.parent
    for path, code in blocks:
        assert (root / path).read_text() == code, f"README example differs from {path}"


def test_readme_is_short_and_links_every_docs_page():
    readme = (_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    pages = sorted(p.name for p in (_ROOT / "docs").glob("*.md"))
    assert {"guard-and-adapters.md", "architecture.md", "reference.md"} <= set(pages)
    missing = [name for name in pages if f"](docs/{name}" not in readme]
    assert not missing, f"README does not link: {missing}"


def test_every_relative_link_in_readme_and_docs_resolves():
    broken = []
    for page in [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert not broken, f"broken links: {broken}"
