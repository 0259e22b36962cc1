"""The package: one import root, a light guard, no generic top-level modules, no import cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "duckdb",
    "pandas",
    "streamlit",
    "plotly",
    "pyarrow",
    "opentelemetry.sdk",
    "openai",
    "anthropic",
    "agents",
    "langchain_core",
    "langgraph",
    # the framework adapters' packages (issue 20): optional extras, never loaded by the import
    "litellm",
    "pydantic_ai",
    "smolagents",
    "crewai",
    "llama_index",
    "google.adk",
    "agent_framework",
    "claude_agent_sdk",
)
WINGS = ("guard", "otlp", "ingest", "importers", "store", "analysis", "sample", "cli")


def _run(code: str) -> subprocess.CompletedProcess:
    # From a directory without the repository on sys.path: what an installed agent process sees.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)


def test_import_budgetlens_loads_no_database_dataframe_or_ui_library():
    done = _run(
        "import sys, budgetlens; from budgetlens import RunBudget, SpendTracker, cost_usd; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.system  # a fresh interpreter: seconds
def test_the_exporter_is_loaded_on_first_use():
    done = _run("import budgetlens; print(budgetlens.DuckDBSpanExporter.__module__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "budgetlens.ingest.exporter"


@pytest.mark.parametrize("name", ["collector", "dashboard"])
def test_no_generic_top_level_module_is_installed(name):
    done = _run(f"import {name}")
    assert done.returncode != 0
    assert "No module named" in done.stderr


def test_each_wing_says_what_it_owns():
    for wing in WINGS:
        init = ROOT / "collector" / wing / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, wing


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    parts[0] = "budgetlens" if parts[0] == "collector" else "budgetlens.dashboard"
    return ".".join(parts)


def _library_modules() -> dict[str, Path]:
    return {_module_name(p): p for base in ("collector", "dashboard") for p in (ROOT / base).rglob("*.py")}


@pytest.mark.system  # imports every module: seconds
def test_nothing_outside_the_dashboard_imports_it():
    for name, path in _library_modules().items():
        if name.startswith("budgetlens.dashboard"):
            continue
        assert not any(m.startswith("budgetlens.dashboard") for m in _imports(path)), name


@pytest.mark.system  # imports every module: seconds
def test_no_import_cycles_at_module_level():
    _assert_acyclic(deferred=False)


@pytest.mark.system  # imports every module: seconds
def test_no_import_circles_even_through_deferred_imports():
    """A function-level import that closes a circle (guard/spend <-> ledgers/accounts <-> pool,
    store/lake <-> lake_ingest <-> writer, issue 18) hides a layering error: a leaf module breaks it."""
    _assert_acyclic(deferred=True)


def _assert_acyclic(*, deferred: bool) -> None:
    modules = _library_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # Module-level imports make a cycle at import time; deferred ones a circle in the layers.
        tree = ast.parse(path.read_text())
        deps = set()
        # Imports under ``if TYPE_CHECKING:`` name types for annotations only: no dependency at
        # run time, in either direction (a parent link and the state it links are typed both ways).
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree) if deferred else tree.body:
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                deps.update(t for t in targets if t in modules and t != name)
        # A package's own __init__ importing its children is not a cycle.
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for dep in graph.get(node, ()):
            if seen.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in seen:
                visit(dep)
        stack.pop()
        seen[node] = 2

    for node in graph:
        if node not in seen:
            visit(node)


def test_every_benchmark_script_imports():
    """A benchmark that no longer imports (a name moved in a renovation) is found here, not on the
    quiet machine at measuring time."""
    import importlib

    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
    assert len(names) >= 10
    for name in names:
        importlib.import_module(f"benchmarks.{name}")
