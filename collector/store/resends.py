"""A span re-sent with other content under the ids of a stored call: reported, not lost (issue 23).

The collector's span memory (``budgetlens.otlp.memory``) rejects such a resend while it
remembers the first span (200,000 spans, one process life). Past that, or after a restart, the
store decides: each call from OTLP carries its span's content fingerprint
(``model_calls.content_digest``, ``budgetlens.otlp.memory.span_digest``), and a batch call whose
``call_id`` is stored (or comes earlier in the same batch) with another digest is a *resend*:

- the stored call (the first one) is kept, the resend is not stored (the primary key);
- the stored call gets the quality flag ``rejected_span`` and its run's totals are recounted, so
  the run is marked as a span id collision marks it on the request path (a row of the run
  carries the flag; ``runs.quality`` shows it);
- the writer returns the resends (``WriteResult.resent``: call_id, span_id, trace_id, run_id),
  and the loader counts them as ``budgetlens_ingest_flagged_spans_total{reason="span_id_collision"}``
  and logs each span id (never a value).

An identical resend (an exporter retry) and a row without a digest (an import, a row stored
before schema version 9) are the usual silent dedupe. The file store's writer and the DuckLake
fold (``budgetlens.store.lake.write_registered``) both call ``find`` and ``mark``.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

#: The quality flag of a run one of whose spans was rejected (``budgetlens.otlp.rejected``).
REJECTED_SPAN = "rejected_span"

#: The columns of a resend as the writer returns it.
RESENT_COLUMNS: tuple[str, ...] = ("call_id", "span_id", "trace_id", "run_id")
RESENT_SCHEMA = pa.schema([(name, pa.string()) for name in RESENT_COLUMNS])

#: Batch calls (registered ``batch_calls``) whose stored call has another content digest.
FIND_STORED = """
SELECT b.call_id, b.span_id, b.trace_id, m.run_id
FROM batch_calls b JOIN model_calls m ON m.call_id = b.call_id
WHERE b.content_digest IS NOT NULL AND m.content_digest IS NOT NULL
  AND b.content_digest <> m.content_digest
"""
#: The stored calls of the resends (registered ``resent``) that do not carry the flag yet.
_UNMARKED = f"""
SELECT call_id, run_id FROM model_calls
WHERE call_id IN (SELECT call_id FROM resent)
  AND NOT list_contains(coalesce(string_split(quality, ','), []), '{REJECTED_SPAN}')
"""
#: Add the flag to them (registered ``marked``); flags stay sorted, as the mapping writes them.
_MARK = f"""
UPDATE model_calls SET quality = array_to_string(list_sort(list_distinct(
    list_append(coalesce(string_split(quality, ','), []), '{REJECTED_SPAN}'))), ',')
WHERE call_id IN (SELECT call_id FROM marked)
"""


def later_differing(rows: pa.Table) -> pa.Table:
    """The rows of ``rows`` (model_calls columns with ``call_id``, in arrival order) whose
    ``call_id`` an earlier row has with another non-NULL ``content_digest``: resends within one
    batch, which keeping the first row per key would drop silently. Empty when none."""
    if "content_digest" not in rows.column_names or not len(rows):
        return rows.slice(0, 0)
    keys = rows.column("call_id").to_pylist()
    if len(set(keys)) == len(keys):
        return rows.slice(0, 0)
    digests = rows.column("content_digest").to_pylist()
    first: dict = {}
    later = []
    for index, (key, digest) in enumerate(zip(keys, digests)):
        if key not in first:
            first[key] = digest
        elif digest is not None and first[key] is not None and digest != first[key]:
            later.append(index)
    return rows.take(pa.array(later, pa.int64()))


def as_resent(rows: pa.Table) -> pa.Table:
    """``rows`` (with call_id, span_id, trace_id and run_id) as a ``RESENT_SCHEMA`` table."""
    return pa.Table.from_arrays(
        [rows.column(name).cast(pa.string()) for name in RESENT_COLUMNS], schema=RESENT_SCHEMA
    )


def find(conn: duckdb.DuckDBPyConnection, in_batch: pa.Table | None = None) -> pa.Table:
    """Inside a DuckLake writer's transaction, before the inserts: the resends among the
    registered ``batch_calls`` against the stored calls, plus ``in_batch`` (``later_differing``
    rows), as ``RESENT_SCHEMA``. (The file store's writer finds the stored ones through the
    insert's primary key instead: ``split_returned``.)"""
    tables = [RESENT_SCHEMA.empty_table()]
    if "content_digest" in conn.sql("SELECT * FROM batch_calls LIMIT 0").columns:
        tables.append(as_resent(conn.sql(FIND_STORED).to_arrow_table()))
    if in_batch is not None and len(in_batch):
        tables.append(as_resent(in_batch))
    return pa.concat_tables(tables)


def split_returned(returned: pa.Table, batch: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``(inserted, resent)`` of what ``sql.INSERT_CALLS`` returned for ``batch``: its
    ``ON CONFLICT`` branch flags (and returns) a stored call whose digest differs from the
    batch's, so a returned row whose ``content_digest`` is not the batch's own is a resend (its
    other columns are the stored call's). ``inserted`` drops ``content_digest``."""
    resent = RESENT_SCHEMA.empty_table()
    if len(returned) and "content_digest" in batch.column_names:
        position = pc.index_in(returned["call_id"], value_set=batch["call_id"].combine_chunks())
        differs = pc.fill_null(
            pc.not_equal(returned["content_digest"], batch["content_digest"].take(position)), False
        )
        if pc.any(differs).as_py():
            resent = as_resent(returned.filter(differs))
            returned = returned.filter(pc.invert(differs))
    return returned.drop_columns(["content_digest"]), resent


def flag_stored(conn: duckdb.DuckDBPyConnection, batch: pa.Table) -> pa.Table:
    """Inside the file store's writer's transaction, after ``sql.INSERT_CALLS_WITHOUT_RESPONSE_IDS``
    left some batch calls out (stored call ids): the stored calls of the registered
    ``batch_calls`` (``batch``) with another content digest get ``rejected_span`` (whether or not they had
    it, as ``sql.INSERT_CALLS``' ``DO UPDATE`` branch does); returns those resends
    (``RESENT_SCHEMA``: the batch's ids, the stored call's run), as ``split_returned`` does for
    ``sql.INSERT_CALLS``. The calls just inserted carry the batch's digest, so they never match."""
    if "content_digest" not in batch.column_names:
        return RESENT_SCHEMA.empty_table()
    resent = as_resent(conn.sql(FIND_STORED).to_arrow_table())
    _mark_calls(conn, resent)
    return resent


def _mark_calls(conn: duckdb.DuckDBPyConnection, marked: pa.Table) -> None:
    """``_MARK`` for the calls of ``marked`` (registered while it runs; nothing when empty)."""
    if len(marked):
        conn.register("marked", marked)
        try:
            conn.execute(_MARK)
        finally:
            conn.unregister("marked")


def mark(conn: duckdb.DuckDBPyConnection, resent: pa.Table) -> pa.Table:
    """Inside the writer's transaction, after the inserts: add ``rejected_span`` to the stored
    call of each resend; returns the runs whose totals must be recounted (a table of
    ``run_id``, empty when no stored call changed)."""
    if not len(resent):
        return pa.table({"run_id": pa.array([], pa.string())})
    conn.register("resent", resent)
    try:
        marked = conn.sql(_UNMARKED).to_arrow_table()
        _mark_calls(conn, marked)
    finally:
        conn.unregister("resent")
    return pa.table({"run_id": pc.unique(marked.column("run_id")).cast(pa.string())})
