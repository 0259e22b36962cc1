"""The dashboard's shape (issue 18): one page style, small files, run links from one helper."""

from __future__ import annotations

import ast
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboard"
PAGES = sorted(p for p in (DASHBOARD / "app_pages").glob("*.py") if not p.name.startswith("_"))


def test_every_page_defines_render_and_ends_by_calling_it():
    assert len(PAGES) == 7
    for page in PAGES:
        tree = ast.parse(page.read_text())
        renders = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "render"]
        assert len(renders) == 1 and renders[0].args.args == [], page.name
        last = tree.body[-1]
        assert isinstance(last, ast.Expr) and ast.unparse(last) == "render()", page.name
        # nothing but definitions before: the page draws only inside render()
        for node in tree.body[:-1]:
            assert isinstance(
                node, (ast.Expr, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign, ast.AnnAssign)
            ), f"{page.name}:{node.lineno}"
            if isinstance(node, ast.Expr):
                assert isinstance(node.value, ast.Constant), f"{page.name}:{node.lineno} calls at import"


def test_no_dashboard_file_is_over_400_lines():
    long = {p.name: n for p in DASHBOARD.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_run_links_come_from_the_one_helper():
    for path in DASHBOARD.rglob("*.py"):
        if path.name == "_tables.py":
            continue
        assert "?run=" not in path.read_text().replace("``?run=<id>``", ""), path.name


def test_the_data_layer_names_no_function_by_string():
    text = (DASHBOARD / "data.py").read_text()
    assert "importlib" not in text and "getattr(" not in text
