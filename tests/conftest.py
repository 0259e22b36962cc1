"""Shared fixtures. Area-specific fixtures live in the test module that needs them."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

# LiteLLM (the litellm and google-adk adapter tests) downloads its price map at import unless told
# to read the copy in its package: the tests run offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO_ROOT = Path(__file__).resolve().parent.parent
REALDATA = REPO_ROOT.parent / "shared" / "realdata"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path for a fresh DuckDB store file (not created yet)."""
    return tmp_path / "store.duckdb"


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return find_free_port()


@pytest.fixture
def realdata() -> Path:
    """The real agent logs in ../shared/realdata (see its SOURCES.md)."""
    if not REALDATA.exists():
        raise FileNotFoundError(f"{REALDATA} is missing: clone main next to shared/")
    return REALDATA


@pytest.fixture
def python() -> str:
    return sys.executable


# --- markers: fast unit tests apart from system tests -------------------------------------------
#: Markers that make a test a system test (a real server, a browser, real data, a subprocess).
SYSTEM_MARKERS = ("browser", "prometheus", "realdata")


def pytest_collection_modifyitems(config, items):
    """A test that reads ../shared/realdata (the ``realdata`` fixture) carries ``realdata``; every
    browser, Prometheus or real-data test is also a ``system`` test, so ``-m "not system"`` runs
    only the fast unit tests."""
    for item in items:
        if "realdata" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realdata)
        if any(item.get_closest_marker(m) for m in SYSTEM_MARKERS):
            item.add_marker(pytest.mark.system)
