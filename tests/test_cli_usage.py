"""A bad option prints the usage of the (sub)command it was given to, not the top-level usage
(issue 24: ``budgetlens baselines --bogus``)."""

from __future__ import annotations

import argparse

import pytest

from budgetlens.cli import build_parser, main


def _commands() -> list[tuple[str, ...]]:
    """Every subcommand, and every action of a subcommand that has actions (``store copy``)."""
    out: list[tuple[str, ...]] = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if path:
            out.append(path)
        for action in children:
            for name, child in action.choices.items():
                walk(child, (*path, name))

    walk(build_parser(), ())
    return out


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_an_unknown_option_prints_the_subcommands_usage(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: budgetlens {' '.join(command)} "), err
    prog = f"budgetlens {' '.join(command)}: error: "
    assert prog in err and ("unrecognized arguments: --bogus" in err or "required" in err), err


def test_an_unknown_top_level_option_keeps_the_top_level_usage(capsys):
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert capsys.readouterr().err.startswith("usage: budgetlens [-h]")
