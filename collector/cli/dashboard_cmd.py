"""``budgetlens dashboard``: serve the Streamlit dashboard on a store (read-only)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
from pathlib import Path

from budgetlens import config
from budgetlens.cli._common import add_db_argument

#: The file the command runs with ``streamlit run`` (found without importing the dashboard): the
#: launcher that serves ``streamlit_app.py`` and warms it up at start.
_DASHBOARD_SPEC = importlib.util.find_spec("budgetlens.dashboard")
assert _DASHBOARD_SPEC is not None and _DASHBOARD_SPEC.origin is not None
ENTRYPOINT = Path(_DASHBOARD_SPEC.origin).resolve().parent / "serve.py"


def add_server_arguments(
    parser: argparse.ArgumentParser, port_flag: str = "--port", free_port: bool = False
) -> None:
    """``--port`` and ``--host`` of the dashboard (shared with ``budgetlens demo``, whose
    ``free_port`` lets ``--port 0`` pick a free port)."""
    free = "; 0 = a free one" if free_port else ""
    parser.add_argument(
        port_flag,
        dest="port",
        type=int,
        default=None,
        help=f"dashboard port (default: ${config.ENV_DASHBOARD_PORT}, else {config.DEFAULT_DASHBOARD_PORT}{free})",
    )
    parser.add_argument(
        "--host",
        default=None,
        help=f"address to bind (default: ${config.ENV_DASHBOARD_HOST}, else "
        f"{config.DEFAULT_DASHBOARD_HOST}; 0.0.0.0 to share on the network)",
    )


def resolve_server(args: argparse.Namespace, free_port: bool = False) -> tuple[str, int]:
    """Return (host, port) from the arguments, the environment, or the defaults; with
    ``free_port`` a port of 0 is returned as 0 (the caller picks a free one).

    Raises ValueError naming the setting when the port is not an integer in 1..65535 (0..65535
    with ``free_port``).
    """
    host = str(config.resolve(args.host, config.ENV_DASHBOARD_HOST, config.DEFAULT_DASHBOARD_HOST))
    raw = config.resolve(args.port, config.ENV_DASHBOARD_PORT, config.DEFAULT_DASHBOARD_PORT)
    try:
        port = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"dashboard port must be an integer, got {raw!r}") from None
    if not (0 if free_port else 1) <= port < 65536:
        raise ValueError(f"dashboard port must be in {0 if free_port else 1}..65535, got {port}")
    return host, port


def streamlit_command(
    db: Path | str, host: str, port: int, entrypoint: Path = ENTRYPOINT
) -> tuple[list[str], dict[str, str]]:
    """Return (argv, env) that run ``streamlit run`` on ``entrypoint`` (the dashboard's launcher;
    the first-paint benchmark passes its floor app) for store ``db``.

    Headless (no browser is opened, no e-mail prompt), no usage statistics; the store path
    reaches the app as ``BUDGETLENS_DB`` (absolute).
    """
    argv = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(entrypoint),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--global.showWarningOnDirectExecution",
        "false",
        "--client.toolbarMode",
        "minimal",
        "--theme.primaryColor",
        "#4C78A8",
    ]
    env = config.child_environment(
        **{config.ENV_DB: str(db.resolve()) if isinstance(db, Path) else db}
    )  # a lake: as given
    return argv, env


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (a bind with SO_REUSEADDR fails).

    SO_REUSEADDR, as the servers use it, lets a port in TIME_WAIT count as free; an unknown
    host counts as free (the server reports it itself).
    """
    address = "127.0.0.1" if host in ("0.0.0.0", "") else host
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError:
            return True
    return False


def store_problem(db: Path | str) -> str | None:
    """Why ``db`` cannot be served, or None when it can: a missing file is fine (the dashboard
    waits for it), so is a DuckDB file another process holds; a path DuckDB cannot open (not a
    DuckDB file, a directory, no permission) gives the store's one-line reason."""
    from budgetlens.store import StoreError, StoreMissing, read_connection
    from budgetlens.store.connection import is_lock_conflict

    try:
        with read_connection(db, timeout_s=1.0):
            return None
    except StoreMissing:
        return None
    except StoreError as error:
        if error.__cause__ is not None and is_lock_conflict(error.__cause__):
            return None
        return str(error)


def url(host: str, port: int) -> str:
    """The address a browser opens (``localhost`` for a wildcard bind)."""
    shown = "localhost" if host in ("0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the dashboard (Streamlit) on a store",
        description=(
            "Serve the budgetlens dashboard: Overview, Cost, Hit rate, Baselines, Presets, "
            "What-if and Runs, with shared filters (time window, task type, model, service, "
            "team, user, tag, time zone) and an auto-refresh control (off by default). It reads "
            "through the running collector of the store, else opens the file read-only per "
            "render, so it runs next to a collector that keeps writing the same store."
        ),
    )
    add_db_argument(parser)
    add_server_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    db = config.resolve_db_path(args.db)
    try:
        host, port = resolve_server(args)
    except ValueError as error:
        print(f"budgetlens dashboard: error: {error}", file=sys.stderr)
        return 1
    exists = not isinstance(db, Path) or db.exists()  # a lake is checked by opening it
    if exists:
        problem = store_problem(db)
        if problem:
            print(f"budgetlens dashboard: error: not a budgetlens store: {problem}", file=sys.stderr)
            return 1
    if port_in_use(host, port):
        print(
            f"budgetlens dashboard: error: port {port} is in use on {host} (another "
            "dashboard or demo?); pick another with --port",
            file=sys.stderr,
        )
        return 1
    argv, env = streamlit_command(db, host, port)
    if isinstance(db, Path) and not db.exists():
        print(
            f"budgetlens dashboard: no store at {db} yet; the dashboard will show it once "
            "a collector, import or `budgetlens sample` creates it",
            file=sys.stderr,
        )
    from budgetlens.store.location import display

    print(
        f"budgetlens dashboard: {url(host, port)} (store {db.resolve() if isinstance(db, Path) else display(db)})",
        flush=True,
    )
    sys.stdout.flush()
    os.execve(argv[0], argv, env)
    return 0  # not reached
