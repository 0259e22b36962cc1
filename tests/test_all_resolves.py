"""Every package of budgetlens keeps its ``__all__`` honest: each name it lists resolves, and
``from <package> import *`` works (a name listed but missing makes the star import raise)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import budgetlens
import budgetlens.dashboard

#: Top-level modules of the optional SDKs behind the drop-in adapters (the pyproject extras
#: ``openai``, ``anthropic``, ``agents``, ``langchain``). Only an adapter package may be skipped,
#: and only when the import fails because one of these is not installed.
OPTIONAL_SDKS = frozenset({"openai", "anthropic", "agents", "langchain_core", "langgraph"})
ADAPTERS = "budgetlens.guard.adapters"


def _packages() -> list[str]:
    """budgetlens and every package below it, including ``budgetlens.dashboard`` (installed
    from its own folder, so it is walked from its own path)."""
    names = {"budgetlens", "budgetlens.dashboard"}
    for root in (budgetlens, budgetlens.dashboard):
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            if info.ispkg:
                names.add(info.name)
    return sorted(names)


def _skip_if_sdk_missing(package: str, error: ModuleNotFoundError) -> None:
    """Skip when ``error`` says an optional SDK is missing under the adapters; else re-raise."""
    missing = (error.name or "").split(".")[0]
    if package.startswith(ADAPTERS) and missing in OPTIONAL_SDKS:
        pytest.skip(f"{package}: optional SDK {missing!r} is not installed")
    raise error


def test_the_walk_finds_the_wings():
    found = _packages()
    for wing in ("budgetlens.analysis", "budgetlens.guard.adapters", "budgetlens.dashboard.charts"):
        assert wing in found


#: The adapters' star import imports every SDK behind them (seconds): a system test.
@pytest.mark.parametrize(
    "package",
    [pytest.param(p, marks=pytest.mark.system) if p == ADAPTERS else p for p in _packages()],
)
def test_every_name_in_all_resolves_and_star_import_works(package):
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    if names is not None:
        assert len(set(names)) == len(names), f"{package}.__all__ lists a name twice"
        unresolved = []
        for name in names:
            try:
                getattr(module, name)
            except ModuleNotFoundError as error:
                _skip_if_sdk_missing(package, error)
            except AttributeError:
                unresolved.append(name)
        assert unresolved == [], f"{package}.__all__ names what it does not define"
    namespace: dict[str, object] = {}
    try:
        exec(f"from {package} import *", namespace)
    except ModuleNotFoundError as error:
        _skip_if_sdk_missing(package, error)
    for name in names or ():
        assert name in namespace, f"from {package} import * did not bind {name}"
