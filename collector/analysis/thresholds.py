"""The two lines the whole product draws (design §6), defined once: the CLI, the SQL, the
dashboard's banners, tiles and charts all read them from here (no pandas or DuckDB import, so
the CLI's argument parser stays light)."""

from __future__ import annotations

#: Below this many runs a task type's P95 (and a hit rate) is marked low-sample: the
#: ``low_sample`` column of ``views.baselines``, the CLI's notes, the dashboard's marks.
LOW_SAMPLE_RUNS = 20
#: The hit-rate alarm line (0..1): above it the budget is too tight or the agent has a bug. The
#: Overview's banner, the charts' dashed line and the CLI.
HIT_RATE_ALARM = 0.20
