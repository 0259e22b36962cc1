"""Debian's headless Chromium on a ``budgetlens dashboard`` subprocess: the one capture harness of
the first-paint benchmark (``benchmarks/first_paint.py``), the README screenshots
(``docs/screenshots.py``) and the browser tests. The scripts import it from the checkout root as
``tests.browser.chromium``, the tests as ``browser.chromium``; nothing in the package imports it
(``dashboard/`` and ``collector/`` never import tests).

``dashboard(db)`` starts ``budgetlens dashboard --db DB --port <free>`` and yields its base URL
once ``/_stcore/health`` answers; ``driver(width, height, profile)`` is a selenium Chrome driver
of ``/usr/bin/chromium`` (``--headless=new --no-sandbox``, nothing fetched from outside the
machine); ``session`` is both. Selenium is imported only when a driver is made.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Flags of every headless run: no sandbox (containers, root), no GPU, no background traffic.
HEADLESS_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
#: Seconds a dashboard may take to answer its health check.
READY_TIMEOUT_S = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base: str, process: subprocess.Popen, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Return once ``base/_stcore/health`` answers ``ok``. Raises RuntimeError when ``process``
    exits first or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the dashboard exited before it answered /_stcore/health")
        try:
            with urllib.request.urlopen(base + "/_stcore/health", timeout=1) as response:
                if response.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the dashboard did not answer /_stcore/health within {timeout_s:.0f} s")


@contextlib.contextmanager
def dashboard(db: Path, timeout_s: float = READY_TIMEOUT_S) -> Iterator[str]:
    """Run ``budgetlens dashboard --db DB --port <free>`` (output discarded); yield its base URL
    (``http://127.0.0.1:<port>``) once healthy; stop it on exit."""
    port = free_port()
    command = [sys.executable, "-m", "budgetlens.cli", "dashboard", "--db", str(db), "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, process, timeout_s)
        yield base
    finally:
        stop(process)


def stop(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """Terminate ``process``; kill it when it has not exited after ``timeout_s`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def driver(width: int, height: int, profile: Path, extra_flags: Sequence[str] = ()):
    """A selenium Chrome driver of headless Chromium with a ``width`` x ``height`` px window and
    its profile in ``profile``; ``extra_flags`` are added to ``HEADLESS_FLAGS``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        *HEADLESS_FLAGS,
        *extra_flags,
        f"--window-size={width},{height}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@contextlib.contextmanager
def session(
    db: Path,
    width: int,
    height: int,
    profile: Path,
    extra_flags: Sequence[str] = (),
    timeout_s: float = READY_TIMEOUT_S,
) -> Iterator[tuple[str, Any]]:
    """``dashboard(db)`` and a ``driver`` on it: yields (base URL, driver); quits both on exit."""
    with dashboard(db, timeout_s) as base:
        browser = driver(width, height, profile, extra_flags)
        try:
            yield base, browser
        finally:
            browser.quit()
