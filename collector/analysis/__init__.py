"""The analysis wing (design §6): named SQL (``queries``, and ``replay_queries`` for the evidence
tools), the views that run it per filter (``views``: baselines, hit rate, cost, runs), preset
derivation and comparison (``presets``) and the preset document built from them
(``preset_export``, with its provenance); the evidence a budget is decided on: the what-if replay
and its trade-off curve (``whatif``), censoring-aware Kaplan–Meier baselines (``censoring``),
runaway runs (``runaways``) and drift of the P95 (``drift``). The CLI, the dashboard and the
benchmarks call these; nothing here imports streamlit or plotly."""
