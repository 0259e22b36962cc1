"""Hostile strings in a real store and a crafted URL, in headless Chromium: markdown images and
links, raw HTML and bare URLs planted in every stored field that reaches a page (task type,
model, service, team, user, tag, run id, tool name, stop reason) and in ``?run=`` /
``?task_type=`` make no page request another host (a local "attacker" HTTP server counts every
hit) and render no link or image to it; the sidebar's filters list them (options and chips) as
the text they are."""

from __future__ import annotations

import datetime as dt
import http.server
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from browser.live_writer import run_rows, write_runs
from browser.test_dashboard_browser import PAGES, browser, dashboard  # noqa: F401 (fixture)
from browser.test_dashboard_views_browser import _settled
from budgetlens.attribution import tags_json
from budgetlens.dashboard.formatting import visible_text
from budgetlens.store import write_connection

pytestmark = [pytest.mark.system, pytest.mark.browser]


class _Attacker(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture(scope="module")
def attacker():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", _Attacker.hits
    server.shutdown()
    server.server_close()


def payloads(host: str) -> list[str]:
    """Markdown image, link, Streamlit directive, HTML and bare-URL payloads aimed at ``host``."""
    return [
        f"![x](http://{host}/md-image.png)",
        f"[Your session expired: sign in again](http://{host}/phish)",
        f'<img src="http://{host}/html-image.png">',
        f'<a href="http://{host}/html-link">click</a>',
        f"http://{host}/bare-url",
        f":red[![y](http://{host}/directive.png)]",
        f"**bold** `code`\n# header ![z](http://{host}/newline.png)",
    ]


def _hostile_batches(host: str):
    start = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(hours=1)
    batches = []
    for index, text in enumerate(payloads(host)):
        for copy in range(6):  # enough runs for a baseline; half stopped: in alarm
            run_id = f"{text} #{index}-{copy}"
            calls, records, events = run_rows(
                run_id,
                task_type=text,
                model=text,
                start_utc=start + dt.timedelta(minutes=index, seconds=5 * copy),
                stop_reason="budget_tokens" if copy < 3 else text,
            )
            for row in (*calls, *records):
                row["service_name"] = text
            for record in records:
                record.update(team=text, user_id=text, tags=tags_json({"k": text}))
            for event in events:
                event["tool_name"] = text
                event["reason"] = text
            batches.append((calls, records, events))
    return batches


@pytest.fixture(scope="module")
def hostile_dashboard(tmp_path_factory, attacker):
    host, _ = attacker
    db = Path(tmp_path_factory.mktemp("hostile")) / "hostile.duckdb"
    with write_connection(db) as conn:
        write_runs(conn, _hostile_batches(host))  # one commit (as one write_batch per run would store them)
    with dashboard(db) as base:
        yield base


def _links_and_images_to(driver, host: str) -> list[str]:
    found = driver.execute_script(
        """
        const out = [];
        for (const el of document.querySelectorAll('a, img, image, iframe, source')) {
          for (const name of ['href', 'src', 'xlink:href']) {
            const v = el.getAttribute(name);
            if (v && v.includes(arguments[0])) out.push(el.tagName + ' ' + v);
          }
        }
        return out;
        """,
        host,
    )
    return list(found)


def test_no_planted_payload_makes_a_page_fetch_or_link_another_host(browser, hostile_dashboard, attacker):  # noqa: F811
    host, hits = attacker
    texts = payloads(host)
    urls = [f"{hostile_dashboard}/{'' if page == 'overview' else page}" for page in PAGES]
    quoted_run = urllib.parse.quote(f"{texts[1]} #1-0")
    urls += [
        f"{hostile_dashboard}/runs?run={quoted_run}",
        f"{hostile_dashboard}/runs?run={urllib.parse.quote(texts[0])}",  # not in the store
        f"{hostile_dashboard}/runs?run={urllib.parse.quote(texts[6])}",
        f"{hostile_dashboard}/?task_type={urllib.parse.quote(texts[0])}",
    ]
    rendered = []
    for url in urls:
        browser.get(url)
        _settled(browser, chart=False)
        time.sleep(1.0)
        rendered.append((url, _links_and_images_to(browser, host)))
    time.sleep(1.0)
    assert hits == [], hits
    assert [(url, found) for url, found in rendered if found] == []
    # the payloads are shown as text, not dropped: the alarm banner names a planted task type
    browser.get(hostile_dashboard + "/")
    _settled(browser, chart=False)
    body = browser.find_element("tag name", "body").text.replace("\u2060", "")
    assert f"[Your session expired: sign in again](http://{host}/phish)" in body


#: The sidebar's filters that list stored strings (widget key -> URL parameter).
SIDEBAR_FILTERS = {
    "app_task_types": "task_type",
    "app_models": "model",
    "app_services": "service",
    "app_teams": "team",
    "app_users": "user",
    "app_tags": "tag",
}


def _sidebar_labels(driver, key: str, *, open_list: bool) -> str:
    """The text the sidebar filter ``key`` shows: its chips, and with ``open_list`` its option
    list (opened with a click, closed with Escape)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 30)
    selector = f"[data-testid='stSidebar'] .st-key-{key}"  # drawn once the sidebar's run reaches it
    widget = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))[0]
    field = wait.until(lambda d: widget.find_elements(By.TAG_NAME, "input"))[0]  # its code loaded
    text = widget.text
    if open_list:
        dropdown = "[data-testid='stMultiSelectDropdown']"
        field.click()
        text += "\n" + wait.until(
            lambda d: "\n".join(found.text for found in d.find_elements(By.CSS_SELECTOR, dropdown)).strip()
        )
        driver.switch_to.active_element.send_keys(Keys.ESCAPE)
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, dropdown))
    return text.replace("\u2060", "")


def test_the_sidebar_filters_list_planted_values_as_text_and_fetch_nothing(
    browser,  # noqa: F811
    hostile_dashboard,
    attacker,
):
    host, hits = attacker
    texts = payloads(host)
    # the lists: nothing picked, each filter opened in turn
    browser.get(hostile_dashboard + "/")
    _settled(browser, chart=False)
    listed = {key: _sidebar_labels(browser, key, open_list=True) for key in SIDEBAR_FILTERS}
    found = _links_and_images_to(browser, host)
    # the chips: every planted value picked through the URL
    query = urllib.parse.urlencode(
        [
            (param, f"k={text}" if param == "tag" else text)
            for param in SIDEBAR_FILTERS.values()
            for text in texts
        ]
    )
    browser.get(f"{hostile_dashboard}/?{query}")
    _settled(browser, chart=False)
    chips = {key: _sidebar_labels(browser, key, open_list=False) for key in SIDEBAR_FILTERS}
    found += _links_and_images_to(browser, host)
    time.sleep(1.0)
    assert hits == [], hits
    assert found == []
    for key, shown in (*listed.items(), *chips.items()):
        for text in texts[:6]:  # one line each (the seventh has a newline: shown escaped)
            assert visible_text(text) in shown, (key, text, shown)
        assert visible_text(texts[6]) in shown.replace("\n", ""), (key, shown)
