"""Issue 24 on the dashboard's pages, in headless Chromium at 1280 px (``--headless --no-sandbox``)
on real ``budgetlens dashboard`` subprocesses: every point of item 10 and of the "Deliver" list that
shows on a page, one page load per page where it can.

- Overview: the change against the previous period shows when the data covers it and is hidden
  when it covers it in part; "Intervention rate" is a share (in %), never "Interventions"; the
  demo store opens on runs that end now, none left out, its runaways counted.
- Hit rate: a 24 h window draws the rate per hour (one dot per hour, not one daily dot); the
  count of intervened runs is named apart from the rate.
- What-if: one unit for rates (the upper bound in % like the projected range); "Met" only when
  the upper bound meets the target, "unknown" between the bounds; a range exactly when runs are
  censored; the result above the fold.
- Baselines and Presets: one preset number (the histogram's marker is the Presets page's
  recommendation); the censoring-aware P95 with the censored share; the limits in force with
  the date they took effect.
- Runs: the grid shows its rows without empty space below them; the quality column never reads
  None; unknown usage is not "unpriced"; a run stopped by its cost limit shows every limit with
  the one that fired, cost and time on their own axes, and a link to its trace.
- Cost: the unpriced banner names the model. Any page: URL parameters it cannot use are named.
- Every table at 1280 px: inside the page (no sideways page scroll), its key columns in view
  and its first column pinned while the rest scroll inside the table's own frame.

Tables are canvas (glide-data-grid); their cells are read from the grid's accessibility table,
which holds the displayed rows and columns as text.
"""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest

from browser import test_dashboard_views_browser as views_browser
from browser.live_writer import run_rows
from browser.quiet import until_quiet
from browser.test_dashboard_browser import PAGES, dashboard
from browser.test_dashboard_views_browser import WIDTH_PX, _body, _settled, _write
from budgetlens.analysis import views as analysis
from budgetlens.config import ENV_TRACE_URL
from budgetlens.dashboard.formatting import format_tokens
from budgetlens.sample import default_end_utc, ensure_demo_store, write_sample

pytestmark = [pytest.mark.browser, pytest.mark.system]

#: Chromium at 1280 px (the fixture of the views tests, one instance per module).
browser = views_browser.browser

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_TEMPLATE = "http://127.0.0.1:16686/trace/{trace_id}"
UNPRICED_MODEL = "acme-model-x9"
#: Height of one glide-data-grid row (and of its header), px.
ROW_PX = 35


def _hourly_batches(now: dt.datetime):
    """Two runs in each of the 4 hours before this one (one of each pair stopped by its budget),
    a run stopped by its cost limit (with a trace id), one whose calls reported no usage (on a
    priced model) and one on a model with no price."""
    base = now.replace(minute=30, second=0, microsecond=0) - dt.timedelta(hours=1)
    batches = []
    for index in range(8):
        start = base - dt.timedelta(hours=index // 2, minutes=10 * (index % 2) + 1)
        stop = "budget_tokens" if index % 2 else "completed"
        batches.append(run_rows(f"h-{index:02d}", task_type="hourly", start_utc=start, stop_reason=stop))
    calls, records, events = run_rows(
        "cost-stop", task_type="priced", start_utc=base - dt.timedelta(minutes=5), stop_reason="budget_cost"
    )
    records[0].update(trace_id=TRACE_ID, limit_cost_usd=0.005, limit_duration_s=300.0)
    for call in calls:
        call["trace_id"] = TRACE_ID
    batches.append((calls, records, events))
    calls, records, events = run_rows(
        "unknown-usage", task_type="priced", start_utc=base - dt.timedelta(minutes=7)
    )
    for call in calls:  # no call reported its usage: the cost is unknown, not unpriced
        call.update(usage_status="unknown", cost_usd=None)
    records[0]["usage_status"] = "unknown"
    batches.append((calls, records, events))
    batches.append(
        run_rows(
            "unpriced-run",
            task_type="priced",
            start_utc=base - dt.timedelta(minutes=9),
            model=UNPRICED_MODEL,
            priced=False,
        )
    )
    return batches


@pytest.fixture(scope="module")
def item10_dashboard(tmp_path_factory):
    """The store of ``_hourly_batches``, the dashboard started with a trace URL template."""
    db = _write(tmp_path_factory.mktemp("item10") / "item10.duckdb", _hourly_batches(analysis.utc_now()))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV_TRACE_URL, TRACE_TEMPLATE)
        with dashboard(db) as base:
            yield base


@pytest.fixture(scope="module")
def sample_dashboard(tmp_path_factory):
    """The seeded sample over 16 days up to today (a 7-day window's previous week is covered,
    a 14-day window's previous fortnight only in part)."""
    db = tmp_path_factory.mktemp("item10_sample") / "sample.duckdb"
    write_sample(db, days=16, seed=5, runs_per_day=40, end_utc=default_end_utc())
    with dashboard(db) as base:
        yield base


def _tiles(driver) -> dict[str, tuple[str, str]]:
    """KPI tiles: label -> (value, delta text or "")."""
    return driver.execute_script(
        """
        const out = {};
        for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
          const label = m.querySelector('[data-testid="stMetricLabel"]').textContent.trim();
          const value = m.querySelector('[data-testid="stMetricValue"]').textContent.trim();
          const delta = m.querySelector('[data-testid="stMetricDelta"]');
          out[label] = [value, delta ? delta.textContent.trim() : ''];
        }
        return out;
        """
    )


def _open_expanders(driver) -> None:
    driver.execute_script(
        "for (const s of document.querySelectorAll("
        "'[data-testid=\"stExpander\"] details:not([open]) summary')) s.click();"
    )
    until_quiet(driver)  # the tables inside mounted


#: Every table on the page: frame box, scroller sizes, visible header texts by column index,
#: visible rows (column index -> cell text) and the row count (header included).
_GRIDS_JS = """
const main = document.querySelector('[data-testid="stMainBlockContainer"]').getBoundingClientRect();
return [...document.querySelectorAll('[data-testid="stDataFrame"]')]
    .filter(el => el.querySelector('.dvn-scroller') && el.querySelector('table[role="grid"]'))
    .map(el => {
  const box = el.getBoundingClientRect();
  const sc = el.querySelector('.dvn-scroller');
  const table = el.querySelector('table[role="grid"]');
  const cells = tr => Object.fromEntries([...tr.querySelectorAll('th, td')].map(
      c => [c.getAttribute('aria-colindex'), c.textContent]));
  return {
    left: box.left, right: box.right, top: box.top, height: box.height,
    main_left: main.left, main_right: main.right,
    scroll: [sc.scrollWidth, sc.clientWidth, sc.scrollHeight, sc.clientHeight],
    rowcount: +table.getAttribute('aria-rowcount'),
    heads: cells(table.querySelector('thead tr')),
    rows: [...table.querySelectorAll('tbody tr')].map(cells),
  };
});
"""


def _grids(driver, scroll_right: bool = False) -> list[dict]:
    if scroll_right:
        driver.execute_script(
            "for (const s of document.querySelectorAll('[data-testid=\"stDataFrame\"] .dvn-scroller'))"
            " s.scrollLeft = s.scrollWidth;"
        )
        until_quiet(driver)  # the grids drew their scrolled columns
    return driver.execute_script(_GRIDS_JS)


def _records(grid: dict) -> list[dict[str, str]]:
    """The visible rows of a grid as header text -> cell text."""
    return [{grid["heads"][i]: text for i, text in row.items() if i in grid["heads"]} for row in grid["rows"]]


def _grid_with(driver, header: str, scroll_right: bool = False) -> dict:
    """The first table with a column headed ``header`` (waiting for a grid still mounting)."""
    deadline = time.monotonic() + 20
    while True:
        grids = [g for g in _grids(driver, scroll_right) if header in g["heads"].values()]
        if grids or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert grids, (header, [list(g["heads"].values()) for g in _grids(driver)])
    return grids[0]


def _chart_titles(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot .gtitle')].map(t => t.textContent);"
    )


def test_overview_compares_only_with_a_covered_previous_period_and_names_rates_as_shares(
    browser, sample_dashboard
):
    browser.get(f"{sample_dashboard}/?window=7d")
    _settled(browser)
    tiles = _tiles(browser)
    assert tiles["Runs"][1].endswith("vs previous period"), tiles["Runs"]  # 7 days before: covered
    assert tiles["Intervention rate"][0].endswith(" %") and "Interventions" not in tiles
    browser.get(f"{sample_dashboard}/?window=30d")  # the 30 days before: 16 days of data at most
    _settled(browser)
    assert not [label for label, (_, delta) in _tiles(browser).items() if "previous" in delta]


def test_a_24_hour_window_draws_the_hit_rate_per_hour(browser, item10_dashboard):
    browser.get(f"{item10_dashboard}/hit_rate?window=24h&task_type=hourly")
    _settled(browser)
    assert "Budget hit rate per hour" in _chart_titles(browser)
    points = browser.execute_script(
        """
        for (const plot of document.querySelectorAll('.js-plotly-plot')) {
          const t = plot.querySelector('.gtitle');
          if (t && t.textContent === 'Budget hit rate per hour')
            return [...plot.querySelectorAll('.scatterlayer .trace')].map(
              tr => tr.querySelectorAll('.points path').length);
        }
        return null;
        """
    )
    assert points == [4], points  # one task type, one dot per hour with runs (not one daily dot)
    assert "rates per hour" in _body(browser)
    tiles = _tiles(browser)
    assert tiles["Intervention rate"][0].endswith(" %") and tiles["Intervened runs"][0].isdigit()
    assert "Interventions" not in tiles


def _range(text: str) -> tuple[float, float]:
    """``3.8–11.4 %`` or ``1.7 %`` as (low, high) in percent."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)]
    return numbers[0], numbers[-1]


def test_whatif_shows_met_only_on_the_upper_bound_in_one_unit_above_the_fold(browser, sample_dashboard):
    browser.get(f"{sample_dashboard}/whatif")
    _settled(browser)
    from selenium.webdriver.common.by import By

    heading = next(
        h
        for h in browser.find_elements(By.CSS_SELECTOR, "h3")
        if h.text.startswith("Smallest multiplier per task type")
    )
    presets = _grid_with(browser, "Verdict")
    fold = browser.execute_script("return window.innerHeight;")
    assert heading.rect["y"] < fold and presets["top"] + 3 * ROW_PX < fold, (
        heading.rect,
        presets["top"],
        fold,
    )
    alerts = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')
    assert len([a for a in alerts if a.rect["y"] < heading.rect["y"]]) <= 1  # not five boxes above it
    target = 5.0  # the page's default target hit rate (%)
    verdicts = {}
    for row in _records(presets):
        low, high = _range(row["Projected hit rate"])
        verdict = row["Verdict"]
        verdicts[row["Task type"]] = (low, high)
        if verdict == "met":
            assert high <= target, row
        elif verdict == "unknown":
            assert low <= target < high, row
    assert verdicts
    summary = _records(_grid_with(browser, "Hit rate upper"))
    for row in summary:  # the upper bound in the same unit (%) as the projected range
        assert float(row["Hit rate upper"]) == pytest.approx(verdicts[row["Task type"]][1], abs=0.06), row
        low, high = verdicts[row["Task type"]]
        assert (low < high) == (int(row["Censored"]) > 0), row  # a range exactly when runs are censored
    assert not re.search(r"\b0\.\d{3,}\b", _body(browser))  # no bare fraction for a rate


def test_baselines_and_presets_show_one_preset_number_and_the_limits_in_force(browser, sample_dashboard):
    browser.get(f"{sample_dashboard}/presets")
    _settled(browser, chart=False)
    recommended = {
        row["Task type"]: float(row["Recommended"])
        for row in _records(_grid_with(browser, "Recommended"))
        if row.get("Limit") == "max_total_tokens"
    }
    assert recommended, "no max_total_tokens row on the Presets page"
    _open_expanders(browser)
    since = _grid_with(browser, "Since (UTC)")
    assert {r["Task type"] for r in _records(since)} >= set(recommended)
    assert all(re.match(r"\d{4}-\d\d-\d\d", r["Since (UTC)"]) for r in _records(since))
    browser.get(f"{sample_dashboard}/baselines")
    _settled(browser)
    legends = browser.execute_script(
        """
        const out = {};
        for (const plot of document.querySelectorAll('.js-plotly-plot')) {
          const t = plot.querySelector('.gtitle');
          if (!t || !t.textContent.endsWith(': total tokens per run')) continue;
          out[t.textContent.split(':')[0]] = [...plot.querySelectorAll('.legendtext')].map(l => l.textContent);
        }
        return out;
        """
    )
    for task, value in recommended.items():
        assert f"Preset {format_tokens(value)}" in legends[task], (task, value, legends.get(task))
    km = _records(_grid_with(browser, "KM P95 total tokens"))  # censoring-aware, with the censored share
    assert km and all(re.fullmatch(r"[\d,]+ \(\d+\.\d %\)", r["Stopped by a budget"]) for r in km), km
    _open_expanders(browser)
    assert _grid_with(browser, "Since (UTC)")


def test_a_run_shows_every_limit_the_one_that_fired_and_its_trace_link(browser, item10_dashboard):
    from selenium.webdriver.common.by import By

    browser.get(f"{item10_dashboard}/runs?window=24h&run=cost-stop")
    _settled(browser)
    body = _body(browser)
    assert "Run cost-stop" in body and "budget_cost" in body
    limits = {r["Limit"]: r for r in _records(_grid_with(browser, "Stopped the run"))}
    assert set(limits) >= {"max_total_tokens", "max_cost_usd", "max_duration_s"}, limits
    assert [k for k, r in limits.items() if r["Stopped the run"]] == ["max_cost_usd"]
    assert "Cost and time per turn" in _chart_titles(browser)
    annotations = browser.execute_script(
        "return [...document.querySelectorAll('.js-plotly-plot .annotation-text')].map(a => a.textContent);"
    )
    assert any("cost limit" in a and "stopped the run" in a for a in annotations), annotations
    assert any(a.startswith("time limit") for a in annotations), annotations
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "a") if "Open the trace" in a.text)
    assert link.get_attribute("href") == TRACE_TEMPLATE.replace("{trace_id}", TRACE_ID)


def test_the_runs_grid_has_no_empty_space_no_none_and_unknown_usage_is_not_unpriced(
    browser, item10_dashboard
):
    browser.get(f"{item10_dashboard}/runs?window=24h")
    _settled(browser, chart=False)
    grid = _grid_with(browser, "Run ID")
    rows = grid["rowcount"]  # 11 runs and the header
    assert rows == 12 and grid["height"] >= rows * ROW_PX  # every row in view (not 7)
    assert grid["height"] <= rows * ROW_PX + 12  # and no empty space below them
    right = _grid_with(browser, "Run ID", scroll_right=True)
    records = {r["Run ID"].split("run=")[-1]: r for r in _records(right)}
    assert {r.get("Quality flags") for r in records.values()} <= {""}, records  # never None
    left = {r["Run ID"].split("run=")[-1]: r for r in _records(grid)}
    assert left["unknown-usage"]["Cost (USD)"] == "unknown usage"
    assert left["unpriced-run"]["Cost (USD)"] == "unpriced"


def test_the_unpriced_banner_names_the_model_and_unknown_url_parameters_are_named(browser, item10_dashboard):
    browser.get(f"{item10_dashboard}/cost?window=24h")
    _settled(browser)
    assert f"no known price ({UNPRICED_MODEL})" in _body(browser).replace("\u2060", "")
    browser.get(f"{item10_dashboard}/?window=bogus&tz=Mars/Phobos")
    _settled(browser)
    body = _body(browser).replace("\u2060", "")
    assert "Ignored in the address" in body and "window=bogus" in body and "tz=Mars/Phobos" in body


@pytest.mark.parametrize("store", ["sample", "item10"])
def test_every_table_fits_1280_px_with_its_key_columns_in_view(
    browser, sample_dashboard, item10_dashboard, store
):
    """At 1280 px no table widens the page; a table wider than its frame scrolls inside it with
    its first (key) column pinned, and shows at least its first three columns whole."""
    base = sample_dashboard if store == "sample" else item10_dashboard
    run = "?run=cost-stop&window=24h" if store == "item10" else ""
    assert browser.execute_script("return window.innerWidth;") == WIDTH_PX
    seen = 0
    for page in PAGES:
        browser.get(f"{base}/{'' if page == 'overview' else page}{run if page == 'runs' else ''}")
        _settled(browser, chart=False)
        _open_expanders(browser)
        width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth];")
        assert width[0] <= width[1], (page, width)  # the page never scrolls sideways
        grids, pinned = _grids(browser), _grids(browser, scroll_right=True)
        for _ in range(3):  # a table drawn a script run later (first paint) joins between reads
            if len(grids) == len(pinned):
                break
            until_quiet(browser)
            grids, pinned = _grids(browser), _grids(browser, scroll_right=True)
        for grid, scrolled in zip(grids, pinned, strict=True):
            seen += 1
            heads = [grid["heads"][k] for k in sorted(grid["heads"], key=int)]
            assert grid["main_left"] <= grid["left"] and grid["right"] <= grid["main_right"] + 1, (
                page,
                heads,
            )
            if grid["scroll"][0] > grid["scroll"][1] + 1:  # wider than its frame: scrolls inside it
                # columns lie left to right: a 4th column in view means the first three are whole
                assert len(heads) >= 4, (page, heads)
                assert "1" in scrolled["heads"], (page, heads, scrolled["heads"])  # first column pinned
            if grid["scroll"][2] <= grid["scroll"][3] + 1:  # every row in view: no empty space below
                assert grid["height"] <= grid["rowcount"] * ROW_PX + 12, (page, heads, grid)
    assert seen >= 5


def test_the_demo_store_opens_on_data_that_ends_now_with_its_runaways(browser, tmp_path):
    db = tmp_path / "demo.duckdb"
    assert ensure_demo_store(db)  # as ``budgetlens demo`` builds it: the sample, moved to end now
    with dashboard(db) as base:
        browser.get(base)
        _settled(browser)
        body = _body(browser)
    newest = re.search(r"newest run started (just now|\d+ (min|h) ago)", body)
    assert newest, body[:600]  # minutes or hours ago, never days: the sample ends now
    assert "This window keeps" not in body  # the default 14 days leave no run out
    runaways = re.search(r"([\d,]+) of ([\d,]+) runs", body[body.index("Runaway runs") :])
    assert runaways and int(runaways.group(1).replace(",", "")) > 0, body[body.index("Runaway runs") :][:300]
