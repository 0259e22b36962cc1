"""How readers reach a store: through the running collector, else the file itself.

While a collector runs on a file store it holds the file (``budgetlens.store.host``), and
publishes next to it how to query through it:

- ``<store>.collector.json``: ``{"url": "http://127.0.0.1:4318", "pid": N}``;
- ``<store>.collector.token``: the bearer token of its read endpoint, readable only by the
  owner (mode 0600), so only the collector's own user can read the data it holds.

``connect(location)`` is the one function readers (the dashboard, the CLI, the benchmarks) open
a store with. It yields a connection-like object with ``execute(sql, params)`` returning a
result with ``fetchall()``, ``fetchone()``, ``df()`` and ``arrow()``: a ``RemoteStore`` talking to
the collector's ``/v1/store/query`` (Arrow IPC) when one is published and answers, else a
read-only DuckDB connection to the file (or a DuckLake) from ``read_connection``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from budgetlens.store.connection import DEFAULT_READ_TIMEOUT_S, StoreError, read_connection
from budgetlens.store.location import LakeLocation, store_location
from budgetlens.store.publisher_pid import publisher_alive
from budgetlens.store.wire import encode_params

log = logging.getLogger(__name__)

INFO_SUFFIX = ".collector.json"
TOKEN_SUFFIX = ".collector.token"
#: How long a reader waits for the collector's answer to one query (s).
DEFAULT_QUERY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Endpoint:
    """A running collector's read endpoint: ``url`` (base, no path) and its bearer ``token``."""

    url: str
    token: str


def sidecar_paths(db_path: str | os.PathLike) -> tuple[Path, Path]:
    """(info file, token file) published next to the store file ``db_path``."""
    path = Path(db_path)
    return path.with_name(path.name + INFO_SUFFIX), path.with_name(path.name + TOKEN_SUFFIX)


def publish(db_path: str | os.PathLike, url: str, token: str) -> None:
    """Write the sidecar files of a collector serving ``url`` for ``db_path`` (the token file
    mode 0600, created so before the token is written). Raises OSError when they cannot be
    written."""
    info, token_path = sidecar_paths(db_path)
    with contextlib.suppress(FileNotFoundError):
        token_path.unlink()
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
    temporary = info.with_name(info.name + ".tmp")
    temporary.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    temporary.replace(info)


def unpublish(db_path: str | os.PathLike) -> None:
    """Remove the sidecar files when this process published them (never raises)."""
    info, token_path = sidecar_paths(db_path)
    try:
        if json.loads(info.read_text()).get("pid") != os.getpid():
            return
    except (OSError, ValueError):
        return
    for path in (info, token_path):
        with contextlib.suppress(OSError):
            path.unlink()


def discover(db_path: str | os.PathLike) -> Endpoint | None:
    """The read endpoint a live collector published for ``db_path``, or None (no sidecar, its
    process is gone, or the token file is not readable by this user)."""
    info, token_path = sidecar_paths(db_path)
    try:
        published = json.loads(info.read_text())
        url, pid = str(published["url"]), int(published["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        published_at = info.stat().st_mtime
    except OSError:
        return None
    if not publisher_alive(pid, published_at):
        return None  # a collector killed with -9 left it behind (gone, a zombie, its PID reused)
    try:
        token = token_path.read_text().strip()
    except OSError as error:
        log.debug("collector token of %s not readable: %s", db_path, error)
        return None
    return Endpoint(url, token) if token else None


class RemoteError(StoreError):
    """The collector refused or failed a query: ``status`` (HTTP) and its message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class RemoteResult:
    """The result of one ``RemoteStore.execute``: a pyarrow table read as DuckDB's results are.

    HUGEINT sums (Arrow decimal(38, 0)) come back as int as DuckDB's Python API gives them.
    """

    def __init__(self, table: pa.Table):
        self._table = _ints_for_hugeints(table)
        self._rows: list[tuple] | None = None
        self._next = 0

    @property
    def description(self) -> list[tuple] | None:
        return [(name, None, None, None, None, None, None) for name in self._table.column_names] or None

    def arrow(self) -> pa.Table:
        return self._table

    to_arrow_table = fetch_arrow_table = arrow

    def df(self):
        """A pandas DataFrame (decimals as float64, as DuckDB's ``df()`` gives them)."""
        table = self._table
        for index, field in enumerate(table.schema):
            if pa.types.is_decimal(field.type):
                table = table.set_column(index, field.name, pc.cast(table.column(index), pa.float64()))
        return table.to_pandas()

    fetchdf = df

    def _all(self) -> list[tuple]:
        if self._rows is None:
            columns = [column.to_pylist() for column in self._table.columns]
            self._rows = list(zip(*columns)) if columns else []
        return self._rows

    def fetchall(self) -> list[tuple]:
        rows = self._all()[self._next :]
        self._next = len(self._all())
        return rows

    def fetchone(self) -> tuple | None:
        rows = self._all()
        if self._next >= len(rows):
            return None
        self._next += 1
        return rows[self._next - 1]


def _ints_for_hugeints(table: pa.Table) -> pa.Table:
    for index, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type) and field.type.scale == 0 and field.type.precision == 38:
            with contextlib.suppress(pa.ArrowInvalid):  # beyond int64: keep the decimal
                table = table.set_column(index, field.name, pc.cast(table.column(index), pa.int64()))
    return table


class RemoteStore:
    """A connection-like reader of the store a collector holds (``execute(sql, params)``).

    Statements are sent one by one to ``/v1/store/query``; the first CREATE or DROP (a temp
    table) opens a session on the collector, and every later statement runs in it, so temp
    tables are seen. ``close`` ends the session. Errors: the collector's 400 for a failing
    statement comes back as the DuckDB exception it names (``duckdb.CatalogException``, ...),
    anything else as RemoteError (a StoreError).
    """

    def __init__(self, endpoint: Endpoint, timeout_s: float = DEFAULT_QUERY_TIMEOUT_S):
        import requests

        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._http = requests.Session()
        self._http.headers["Authorization"] = f"Bearer {endpoint.token}"
        self._session: str | None = None

    def execute(self, sql: str, params: Any = None) -> RemoteResult:
        if self._session is None and _needs_session(sql):
            self._session = self._call("POST", "/v1/store/session").json()["session"]
        payload: dict[str, Any] = {"sql": sql}
        if params:
            payload["params"] = encode_params(params)
        if self._session is not None:
            payload["session"] = self._session
        response = self._call("POST", "/v1/store/query", json=payload)
        with pa.ipc.open_stream(response.content) as reader:
            return RemoteResult(reader.read_all())

    sql = execute

    def _call(self, method: str, path: str, **kwargs):
        import requests

        try:
            response = self._http.request(method, self.endpoint.url + path, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as error:
            raise RemoteError(0, f"collector at {self.endpoint.url} did not answer: {error}") from error
        if response.status_code >= 400:
            try:
                message = str(response.json().get("error"))
            except ValueError:
                message = response.text
            raise _remote_error(response.status_code, message)
        return response

    def close(self) -> None:
        """End the session (if one was opened) and the HTTP connection; never raises."""
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):
                self._http.delete(f"{self.endpoint.url}/v1/store/session/{session}", timeout=5)
        self._http.close()


def _needs_session(sql: str) -> bool:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return False
    return any(s.type != duckdb.StatementType.SELECT for s in statements)


def _remote_error(status: int, message: str) -> Exception:
    """A failing statement as the DuckDB exception type the collector named, else RemoteError."""
    prefix = "query failed: "
    if status == 400 and message.startswith(prefix):
        name, _, text = message[len(prefix) :].partition(": ")
        kind = getattr(duckdb, name, None)
        if isinstance(kind, type) and issubclass(kind, duckdb.Error):
            return kind(text)
    return RemoteError(status, message)


def _listening(endpoint: Endpoint, timeout_s: float) -> bool:
    """True when something accepts TCP connections at the endpoint's address (the kernel
    accepts even while the collector's event loop is busy, so a loaded collector still counts)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint.url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=min(timeout_s, 2.0)):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def connect(
    location: str | os.PathLike | LakeLocation, *, timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> Iterator[Any]:
    """A reader of the store at ``location`` for a few queries: through the collector that holds
    the file (``RemoteStore``) when one is published and answers, else ``read_connection``
    (read-only, ``timeout_s`` for a lock). The object yielded has ``execute(sql, params)``.

    Raises what ``read_connection`` raises (StoreMissing, StoreError) on the file path;
    RemoteError / DuckDB errors from queries through the collector.
    """
    parsed = store_location(location)
    endpoint = None if isinstance(parsed, LakeLocation) else discover(parsed)
    if endpoint is not None and _listening(endpoint, timeout_s):
        remote = RemoteStore(endpoint)
        try:
            yield remote
        finally:
            remote.close()
        return
    with read_connection(location, timeout_s=timeout_s) as conn:
        yield conn
