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


def _parser_of_command(command: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


@pytest.mark.parametrize("command", [(), *_commands()], ids=lambda c: " ".join(c) or "budgetlens")
def test_help_shows_percent_signs_once(command):
    # argparse %-formats help strings but prints a description as written (new-user report:
    # `store compact --help` said ">= 10 %% deleted rows")
    text = _parser_of_command(command).format_help()
    assert "%%" not in text, text


def test_the_dashboard_help_names_every_page_and_filter_of_the_app():
    import re
    from pathlib import Path

    app = (Path(__file__).parents[1] / "dashboard" / "streamlit_app.py").read_text()
    titles = set(re.findall(r'title="([^"]+)"', app))
    filters = re.findall(r'\("[a-z_]+", "app_[a-z_]+", "[a-z_]+", "([A-Za-z ]+)"\)', app)
    assert {"Overview", "What-if", "Runs"} <= titles and len(filters) == 6
    text = " ".join(_parser_of_command(("dashboard",)).format_help().split())
    missing = [t for t in titles if t not in text] + [f for f in filters if f.lower() not in text]
    assert not missing, text


def test_verbose_after_the_command_is_taken_as_the_top_level_flag(store_path, capsys):
    statement = "SELECT no_such_function()"
    assert main(["store", "sql", "--db", str(store_path), statement]) == 1
    assert "error:" in capsys.readouterr().err
    # with -v after the command the error keeps its traceback, as with -v before it
    for argv in (
        ["-v", "store", "sql", "--db", str(store_path), statement],
        ["store", "sql", "--db", str(store_path), statement, "-v"],
        ["store", "sql", "--verbose", "--db", str(store_path), statement],
    ):
        with pytest.raises(Exception, match="no_such_function"):
            main(argv)
