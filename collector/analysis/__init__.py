"""The analysis wing (design §6): named SQL (``queries``; ``run_queries`` for the run lists,
``replay_queries``, ``peak_queries`` and ``evidence_queries`` for the evidence tools), the shared filters and the
query runner (``filters``), the views that run the SQL per filter (``views``: baselines, hit rate,
cost, runs; it re-exports ``filters``), preset derivation and comparison (``presets``) and the
preset document built from them (``preset_export``, with its provenance); the evidence a budget is
decided on: the what-if replay (``replay``) with its presets, trade-off curve and targets
(``whatif``, re-exporting ``replay``), censoring-aware Kaplan–Meier baselines (``censoring``),
runaway runs (``runaways``) and drift of the P95 (``drift``). One home each for the
"pandas value -> None" rule (``values``), the lines the product draws (``thresholds``) and the
names the CLI and the dashboard share (``defaults``: multiplier, formats, headline columns). The
CLI, the dashboard and the benchmarks call these; nothing here imports streamlit or plotly."""
