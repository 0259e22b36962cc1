"""Hand-made store rows for the analysis tests (``write_batch`` dicts)."""

from __future__ import annotations


def call_row(run_id: str, turn: int, start, model: str | None, **fields) -> dict:
    """A ``model_calls`` row of run ``run_id``'s call ``turn`` (span id ``<run>.c<turn>``, source
    ``test``, task type ``qa``, ``model`` requested and answered, usage reported), with ``fields``
    added or replacing these."""
    row = dict(
        span_id=f"{run_id}.c{turn}",
        run_id=run_id,
        source="test",
        task_type="qa",
        request_model=model,
        response_model=model,
        start_utc=start,
        turn=turn,
        usage_status="reported",
    )
    row.update(fields)
    return row
