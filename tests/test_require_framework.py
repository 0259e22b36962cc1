"""``conftest.require``: an optional framework that is not installed skips its tests on a
developer's machine and fails them under ``CI=true``; it finds a framework without importing it."""

from __future__ import annotations

import sys

import pytest
from conftest import require


def test_a_missing_framework_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and not installed: no_such_framework"):
        require("json", "no_such_framework")


def test_a_missing_framework_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"not installed: no_such_parent\.child"):
        require("no_such_parent.child")  # a missing parent package counts as missing


def test_an_installed_framework_is_found_without_being_imported(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.delitem(sys.modules, "tomllib", raising=False)
    require("tomllib")
    assert "tomllib" not in sys.modules
