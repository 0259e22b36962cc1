"""The guard wing: what an agent process runs (design §1).

Owns ``RunBudget`` (``run_budget``), the per-run bookkeeping (``ledger``), the one limit table and
the stop decisions (``limits``), the values handed to the agent loop (``results``), budget events
(``events``), OpenTelemetry spans of a guarded run (``telemetry``), spend windows across runs
(``spend``) and the preset file's format, reader and document (``preset_file``).

Imports no database, dataframe or UI library: an agent process pays only for the guard.
"""
