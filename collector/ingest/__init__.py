"""The ingest wing: the collector service (design §5).

Owns the HTTP app (``app``: ``POST /v1/traces``, ``/metrics``, ``/healthz``), the ingest queue
(``queue``), the write-ahead journal (``journal``), the loader that moves journaled batches into
the store (``loader``), rows the store refuses (``dead_letter``), Prometheus metrics (``metrics``)
and the in-process span exporter (``exporter``: ``DuckDBSpanExporter``). OTLP decoding and the
span mapping are the ``otlp`` wing's; SQL and the schema are the ``store`` wing's.
"""

import os as _os

# The Prometheus rollup groups journaled Arrow batches with pyarrow (Acero). Batches read back
# from the journal's IPC bytes are not 64-byte aligned, and Acero warns on stderr for every one:
# a flood that filled the collector's stderr pipe and stalled the loader. Realigning is cheap.
_os.environ.setdefault("ACERO_ALIGNMENT_HANDLING", "reallocate")
