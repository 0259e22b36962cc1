"""A preset file that gives one key twice is refused naming the key (breaker round of 2026-12-03:
YAML and JSON loaded ``max_total_tokens: 100`` then ``max_total_tokens: 1000000`` as 1,000,000;
TOML already refused it). Price files are read by the same loader."""

from __future__ import annotations

import pytest

from budgetlens import RunBudget
from budgetlens.config import load_document

DUPLICATES = {
    "limit.yaml": "qa:\n  max_total_tokens: 100\n  max_total_tokens: 1000000\n",
    "task.yaml": "qa:\n  max_total_tokens: 100\nqa:\n  max_total_tokens: 1000000\n",
    "limit.json": '{"qa": {"max_total_tokens": 100, "max_total_tokens": 1000000}}',
    "task.json": '{"qa": {"max_total_tokens": 100}, "qa": {"max_total_tokens": 1000000}}',
    "limit.toml": "[qa]\nmax_total_tokens = 100\nmax_total_tokens = 1000000\n",
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_a_key_given_twice_is_refused_naming_the_file(tmp_path, name):
    path = tmp_path / name
    path.write_text(DUPLICATES[name])
    with pytest.raises(ValueError, match=f"{path.name}: not a valid preset file") as raised:
        RunBudget.from_preset("qa", str(path))
    if not name.endswith(".toml"):  # tomllib's own wording
        key = "max_total_tokens" if name.startswith("limit") else "qa"
        assert f"duplicate key {key!r}" in str(raised.value)


def test_yaml_merge_keys_may_still_be_overridden(tmp_path):
    path = tmp_path / "merged.yaml"
    path.write_text("base: &b {max_turns: 3, max_total_tokens: 900}\nqa:\n  <<: *b\n  max_turns: 5\n")
    assert load_document(path, "preset file") == {
        "base": {"max_turns": 3, "max_total_tokens": 900},
        "qa": {"max_turns": 5, "max_total_tokens": 900},
    }
