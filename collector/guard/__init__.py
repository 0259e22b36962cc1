"""The guard wing: what an agent process runs (design §1).

Owns ``RunBudget`` (``run_budget``, the documented interface) and its state (``run_state``: the lock
and the order of checks, records and events), the option checks (``options``: ``RunOptions``), the stop
decisions (``stops``), the steps in the shared token pool and spend windows (``shared``, over ``pool``
and ``spend``), the per-run bookkeeping (``ledger``), the values handed to the agent loop (``results``),
budget events (``events``), OpenTelemetry spans of a guarded run (``telemetry``) and the preset file's
format, reader and document (``preset_file``). The limit table it checks against is the shared
contract's :mod:`budgetlens.limits`.

Imports no database, dataframe or UI library: an agent process pays only for the guard.
"""
