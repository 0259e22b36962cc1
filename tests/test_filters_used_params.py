"""``used_params``: the ``$name`` parameters a statement names, digits and capitals included."""

import duckdb

from budgetlens.analysis.filters import run_query, used_params


def test_names_with_digits_and_capitals_are_kept_whole():
    statement = "SELECT $p95_cap AS a, $Limit2 AS b, $p AS c"
    params = {"p95_cap": 1, "Limit2": 2, "p": 3, "unused": 4}
    assert used_params(statement, params) == {"p95_cap": 1, "Limit2": 2, "p": 3}


def test_a_prefix_of_a_longer_name_is_not_taken_for_it():
    # before, "$p95" was read as "$p": the statement then lacked $p95 and bound a $p it never names
    assert used_params("SELECT $p95", {"p": 1, "p95": 2}) == {"p95": 2}


def test_run_query_binds_a_digit_name_on_a_real_connection():
    conn = duckdb.connect()
    frame = run_query(conn, "SELECT $p95 * 2 AS doubled", {"p95": 21, "other": 0})
    assert frame["doubled"].tolist() == [42]
