"""Item 10 of issue 24, the CLI's small points: --version, --tz wording, presets -o into a
missing directory failing before any work, "wrote 1 preset"."""

from __future__ import annotations

import pytest

from budgetlens.cli import main


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("budgetlens ")


def test_an_unknown_tz_is_a_usage_error_naming_the_option(capsys):
    with pytest.raises(SystemExit) as done:
        main(["hit-rate", "--tz", "Mars/Phobos"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "--tz: unknown IANA time zone 'Mars/Phobos'" in err and "Filters.tz" not in err


def test_presets_into_a_missing_directory_fails_before_opening_the_store(tmp_path, capsys):
    # the store does not exist either: the output directory is checked first
    code = main(
        ["presets", "--db", str(tmp_path / "none.duckdb"), "-o", str(tmp_path / "missing" / "x.yaml")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "does not exist" in err and "missing" in err


@pytest.mark.system
def test_one_task_type_says_wrote_1_preset(committed_sample_store, tmp_path, capsys):
    out = tmp_path / "p.yaml"
    code = main(
        [
            "presets",
            "--db",
            str(committed_sample_store),
            "--window-days",
            "0",
            "--task-type",
            "simple_qa",
            "-o",
            str(out),
        ]
    )
    assert code == 0 and "wrote 1 preset to" in capsys.readouterr().err and out.exists()
