"""The analysis wing (design §6): named SQL (``queries``), the views that run it per filter
(``views``: baselines, hit rate, cost, runs), preset derivation and comparison (``presets``) and
the preset document built from them (``preset_export``). The CLI, the dashboard and the
benchmarks call these; nothing here imports streamlit or plotly."""
