"""The ingest wing: the collector service (design §5).

Owns the HTTP app (``app``: ``POST /v1/traces``, ``/metrics``, ``/healthz``), the ingest queue
(``queue``), the write-ahead journal (``journal``), the loader that moves journaled batches into
the store (``loader``), rows the store refuses (``dead_letter``), Prometheus metrics (``metrics``)
and the in-process span exporter (``exporter``: ``DuckDBSpanExporter``). OTLP decoding and the
span mapping are the ``otlp`` wing's; SQL and the schema are the ``store`` wing's.
"""
