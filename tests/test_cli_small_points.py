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


@pytest.mark.system  # the CLI on the committed-size sample: seconds
def test_hit_rate_of_a_task_type_without_limits_is_named_as_undefined(db_path, capsys):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from budgetlens import RunBudget, Usage
    from budgetlens.ingest.exporter import DuckDBSpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with RunBudget(max_total_tokens=10_000, run_id="b1", task_type="triage", tracer=tracer) as run:
        run.record(Usage(100, 10), model="gpt-4o")
    # another instrumentation's model call, with no budget guard: a run without limits
    call = {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 100}
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat", **call}):
        pass
    exporter = DuckDBSpanExporter(db_path)
    exporter.export(memory.get_finished_spans())
    exporter.shutdown()

    assert main(["hit-rate", "--db", str(db_path), "--window-days", "0"]) == 0
    captured = capsys.readouterr()
    assert "no run had a limit, so the hit rate is undefined" in captured.err
    assert "triage" in captured.out and "note: triage" not in captured.err
    assert captured.err.count("no run had a limit") == 1
