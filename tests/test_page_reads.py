"""The faster forms of the pages' reads (issue 25) equal their references: the model options split
the distinct model lists, not every run's; a run's detail is read by its integer key; the run
tree carries its columns down the recursion instead of joining every run at the end."""

from __future__ import annotations

import datetime as dt

from _store_rows import call_row

from budgetlens.analysis import queries as q
from budgetlens.analysis import run_queries as q_runs
from budgetlens.analysis import views as analysis
from budgetlens.store import read_connection, write_batch, write_connection

T0 = dt.datetime(2026, 11, 2, 9)
#: The reference: every run's model list split (the statement before issue 25).
_MODELS_PER_RUN = """
SELECT DISTINCT model FROM (
    SELECT unnest(string_split(models, ',')) AS model FROM runs WHERE models IS NOT NULL
) WHERE model <> '' ORDER BY model
"""

#: The reference of ``run_queries.RUN_TREE``: the tree's ids joined with ``runs`` at the end.
_RUN_TREE_JOINED = """
WITH RECURSIVE tree(run_id, parent_run_id, depth, path) AS (
    SELECT run_id, parent_run_id, 0, [coalesce(CAST(start_utc AS VARCHAR), ''), run_id]
    FROM runs WHERE run_id = $run_id
    UNION ALL
    SELECT r.run_id, r.parent_run_id, t.depth + 1,
           list_concat(t.path, [coalesce(CAST(r.start_utc AS VARCHAR), ''), r.run_id])
    FROM runs r JOIN tree t ON r.parent_run_id = t.run_id
    WHERE t.depth < 32
)
SELECT t.depth, r.run_id, r.parent_run_id, r.task_type, r.start_utc, r.stop_reason, r.turns,
       r.total_tokens, r.cost_usd, r.tool_cost_usd
FROM tree t JOIN runs r ON r.run_id = t.run_id
ORDER BY t.path
"""


def _call(run_id: str, turn: int, model: str | None) -> dict:
    return call_row(run_id, turn, T0 + dt.timedelta(minutes=turn), model, input_tokens=10, output_tokens=5)


def test_the_model_options_equal_every_runs_models_split(store_path):
    runs = {  # one model, a downgrade (two), the same pair again, none known, a record's model
        "a": ["gpt-4.1"],
        "b": ["claude-sonnet-4-5", "claude-haiku-4-5"],
        "c": ["claude-haiku-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"],
        "d": [None],
    }
    calls = [_call(run, turn, model) for run, models in runs.items() for turn, model in enumerate(models, 1)]
    record = dict(run_id="e", source="test", model="my-llama", start_utc=T0, usage_status="reported")
    with write_connection(store_path) as conn:
        write_batch(conn, calls, [record], [])
    with read_connection(store_path) as conn:
        expected = [r[0] for r in conn.execute(_MODELS_PER_RUN).fetchall()]
        assert [r[0] for r in conn.execute(q.OPTION_MODELS).fetchall()] == expected
        assert analysis.filter_options(conn)["models"] == expected
    assert expected == ["claude-haiku-4-5", "claude-sonnet-4-5", "gpt-4.1", "my-llama"]


def test_a_runs_detail_read_by_its_key_equals_the_detail_by_run_id(store_path):
    calls = [_call(run, turn, "gpt-4.1") for run in ("a", "b", "c") for turn in (1, 2, 3)]
    events = [
        dict(event_id=f"{run}.e", run_id=run, ts_utc=T0, name="budgetlens.warning", percent=80.0)
        for run in ("a", "b", "c")
    ]
    with write_connection(store_path) as conn:
        write_batch(conn, calls, [], events)
    with read_connection(store_path) as conn:
        expected = {run: analysis.run_detail(conn, run) for run in ("a", "c")}
    with write_connection(store_path) as conn:
        for table in ("model_calls", "budget_events"):  # b shares a's key: its rows are not a's
            conn.execute(
                f"UPDATE {table} SET run_key = (SELECT run_key FROM {table} WHERE run_id = 'a' LIMIT 1) WHERE run_id = 'b'"
            )
        conn.execute("UPDATE model_calls SET run_key = NULL WHERE turn = 2")  # stored without a key
        conn.execute("UPDATE budget_events SET run_key = NULL WHERE run_id = 'c'")
    with read_connection(store_path) as conn:
        for run, before in expected.items():
            after = analysis.run_detail(conn, run)
            assert before is not None and after is not None
            assert len(before.calls) == 3 and len(before.events) == 1
            assert after.calls.equals(before.calls) and after.events.equals(before.events)


def test_the_run_tree_equals_the_tree_joined_with_the_runs(store_path):
    def record(run_id, minute, parent=None, **fields):
        start = T0 + dt.timedelta(minutes=minute)
        return dict(run_id=run_id, source="test", start_utc=start, usage_status="reported",
                    parent_run_id=parent, total_tokens=100 + minute, **fields)  # fmt: skip

    records = [
        record("root", 0, task_type="qa", cost_usd=0.5),
        record("late", 9, "root"),
        record("early", 3, "root", stop_reason="budget_tokens"),
        record("grandchild", 5, "early", turns=4),
        record("other", 1),
        record("loop-a", 2, "loop-b"),  # a corrupt link: the tree ends at depth 32
        record("loop-b", 2, "loop-a"),
    ]
    with write_connection(store_path) as conn:
        write_batch(conn, [], records, [])
    with read_connection(store_path) as conn:
        for run in ("root", "early", "grandchild", "other", "loop-a", "missing"):
            params = {"run_id": run}
            assert (
                conn.execute(q_runs.RUN_TREE, params).fetchall()
                == conn.execute(_RUN_TREE_JOINED, params).fetchall()
            )
        tree = analysis.run_tree(conn, "root")
    assert tree["run_id"].tolist() == ["root", "early", "grandchild", "late"]
    assert tree["depth"].tolist() == [0, 1, 2, 1]
