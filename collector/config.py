"""Configuration resolved in one place: argument, then environment variable, then default.

Every environment variable budgetlens reads is a named constant here and is listed in the README;
nothing else in the package reads (or sets) the environment. Also reads the small configuration
documents (``load_document``: the price file, the preset file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Path of the DuckDB store used by every command (``--db`` wins over it).
ENV_DB = "BUDGETLENS_DB"

DEFAULT_DB = "budgetlens.duckdb"

#: Where ``python -m benchmarks.queries`` caches its generated stores (default /tmp/budgetlens_bench).
ENV_BENCH_DIR = "BUDGETLENS_BENCH_DIR"

#: Bearer token the collector requires on /v1/traces (``--token`` wins over it; unset = no auth).
ENV_COLLECTOR_TOKEN = "BUDGETLENS_COLLECTOR_TOKEN"
#: Bearer token of the collector's read endpoint /v1/store/* (``--read-token`` wins over it;
#: unset = the ingest token, else a random one published next to the store for local readers).
ENV_COLLECTOR_READ_TOKEN = "BUDGETLENS_COLLECTOR_READ_TOKEN"

#: Port and bind address of the dashboard (``budgetlens dashboard`` / ``demo``; flags win).
ENV_DASHBOARD_PORT = "BUDGETLENS_DASHBOARD_PORT"
ENV_DASHBOARD_HOST = "BUDGETLENS_DASHBOARD_HOST"
DEFAULT_DASHBOARD_PORT = 8501
DEFAULT_DASHBOARD_HOST = "127.0.0.1"

#: The OpenTelemetry SDK's standard variables that budgetlens reads to set up OTLP export in one
#: step (``budgetlens.configure`` / the first ``RunBudget``); the SDK itself reads them and the
#: rest (``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``).
ENV_OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_OTEL_EXPORTER_OTLP_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
ENV_OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
ENV_OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"

#: A URL template that turns a run's trace id into a link to the team's tracing UI (Jaeger,
#: Tempo, Phoenix, Langfuse): ``{trace_id}`` is replaced, e.g.
#: ``http://127.0.0.1:16686/trace/{trace_id}``; unset = no links (``trace_url``).
ENV_TRACE_URL = "BUDGETLENS_TRACE_URL"
TRACE_ID_PLACEHOLDER = "{trace_id}"


def trace_url_template(argument: str | None = None) -> str | None:
    """The trace URL template: ``argument``, else ``BUDGETLENS_TRACE_URL``, else None. Raises
    ValueError naming the variable when the template lacks ``{trace_id}``."""
    template = resolve(argument, ENV_TRACE_URL, None)
    if not template:
        return None
    if TRACE_ID_PLACEHOLDER not in template:
        raise ValueError(
            f"{ENV_TRACE_URL}: the template must contain {TRACE_ID_PLACEHOLDER}, got {template!r}"
        )
    return str(template)


def trace_url(trace_id: str | None, template: str | None) -> str | None:
    """``template`` with ``{trace_id}`` replaced by ``trace_id`` (URL-quoted); None when either
    is missing."""
    if not trace_id or not template:
        return None
    from urllib.parse import quote

    return template.replace(TRACE_ID_PLACEHOLDER, quote(str(trace_id), safe=""))


#: Optional user price file (YAML/JSON/TOML) that overrides or adds model prices (budgetlens.pricing).
ENV_PRICES_FILE = "BUDGETLENS_PRICES_FILE"


#: Set for the collector process at start (``apply_collector_settings``), unless already set: the
#: Prometheus rollup groups journaled Arrow batches with pyarrow (Acero); batches read back from
#: the journal's IPC bytes are not 64-byte aligned, and Acero warns on stderr for every one (a
#: flood that filled the collector's stderr pipe and stalled the loader). Realigning is cheap.
ACERO_ALIGNMENT_VARIABLE = "ACERO_ALIGNMENT_HANDLING"
ACERO_ALIGNMENT = "reallocate"


_ENVIRON = os.environ
_ENVIRON_DATA = getattr(os.environ, "_data", None)
#: Encoded keys of ``os.environ``'s own dict, by variable name (see :func:`environ_get`).
_ENCODED_KEYS: dict[str, object] = {}


def environ_get(env_name: str) -> str | None:
    """``os.environ.get(env_name)``, read from ``os.environ``'s own dict when it has one (CPython's
    ``os._Environ``): an unset variable then costs one dict lookup, not two raised KeyErrors (the
    guard prices each call with a cost limit and checks the price file variable each time)."""
    environ = os.environ
    data = _ENVIRON_DATA
    if environ is not _ENVIRON or data.__class__ is not dict:
        return environ.get(env_name)  # os.environ replaced (by a plain mapping), or not CPython's
    key = _ENCODED_KEYS.get(env_name)
    if key is None:
        key = _ENCODED_KEYS[env_name] = environ.encodekey(env_name)
    raw = data.get(key)
    return None if raw is None else environ.decodevalue(raw)


def resolve(argument, env_name: str, default):
    """Return ``argument`` if given (not None), else the environment variable, else ``default``.

    An environment variable set to the empty string counts as unset."""
    if argument is not None:
        return argument
    value = environ_get(env_name)
    if value not in (None, ""):
        return value
    return default


def env_value(env_name: str) -> str | None:
    """The environment variable ``env_name`` as set (the empty string kept), None when unset:
    for settings where "set but empty" is a mistake to report, not a default to take."""
    return environ_get(env_name)


def child_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` on top: the environment of a child process
    (``budgetlens dashboard`` passes ``BUDGETLENS_DB`` to Streamlit this way)."""
    return {**os.environ, **overrides}


def apply_collector_settings() -> None:
    """Set the process-wide settings the collector needs (``ACERO_ALIGNMENT_VARIABLE``), keeping any
    value the operator set. Called when a collector's ingest queue starts."""
    os.environ.setdefault(ACERO_ALIGNMENT_VARIABLE, ACERO_ALIGNMENT)


#: Where a collector on a DuckLake store keeps its write-ahead journal (``--journal`` wins; a file
#: store keeps it next to the file, ``<db>.journal``).
ENV_JOURNAL_DIR = "BUDGETLENS_JOURNAL_DIR"

#: Data path (directory or ``s3://...``) of a new DuckLake store; a ``?data_path=`` suffix wins.
ENV_LAKE_DATA_PATH = "BUDGETLENS_LAKE_DATA_PATH"

#: A store location that starts with this is a DuckLake (``budgetlens.store.location``).
LAKE_PREFIX = "ducklake:"


def resolve_db_path(argument: str | os.PathLike | None = None) -> Path | str:
    """Return the store: ``--db`` argument, else ``BUDGETLENS_DB``, else ``budgetlens.duckdb``.

    A file store is a ``Path``; a DuckLake location (``ducklake:...``) is returned as the string
    given (it is no path: ``s3://`` and libpq settings must stay as written).
    """
    value = resolve(argument, ENV_DB, DEFAULT_DB)
    return str(value) if is_lake_location(value) else Path(value)


def is_lake_location(location: str | os.PathLike) -> bool:
    """True when the store ``location`` names a DuckLake (``ducklake:...``), not a DuckDB file."""
    return str(location).startswith(LAKE_PREFIX)


#: The largest configuration document read (bytes): a price or preset file is a few KB.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def _read_regular(p: Path, what: str) -> bytes:
    """The bytes of the regular file ``p``. Opened without blocking, so a FIFO (or a device)
    is refused at once instead of hanging the process; ValueError for anything but a regular
    file or a file over ``MAX_DOCUMENT_BYTES``; FileNotFoundError when it is missing."""
    import stat

    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{p}: a {what} must be a regular file (not a FIFO, device or directory)")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise ValueError(f"{p}: a {what} must be at most {MAX_DOCUMENT_BYTES} bytes")
        with os.fdopen(fd, "rb") as file:
            fd = -1
            return file.read(MAX_DOCUMENT_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)


def load_document(path: str | os.PathLike, what: str) -> object:
    """Read a small configuration document (YAML, TOML or JSON, chosen by the file extension):
    the parsed document at ``path`` (a mapping, usually).

    ``what`` names the file in errors ("preset file", "price file"). The file is UTF-8 text; a
    leading byte-order mark is ignored. Raises ValueError naming the file for an extension other
    than .yaml, .yml, .toml or .json, a path that is not a regular file (a FIFO is refused, never
    waited on), text that is not UTF-8, or a document that does not parse, including a mapping
    that gives one key twice (YAML and JSON parsers would keep the last silently; TOML refuses it);
    FileNotFoundError when the file is missing.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"{p}: {what} extension must be .yaml, .yml, .toml or .json, got {suffix!r}")
    try:
        text = _read_regular(p, what).decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{p}: a {what} must be UTF-8 text: {error}") from error
    try:
        if suffix in (".yaml", ".yml"):
            return _yaml_without_duplicate_keys(text)
        if suffix == ".toml":  # TOML itself refuses a key given twice
            import tomllib

            return tomllib.loads(text)
        return json.loads(text, object_pairs_hook=_json_object_without_duplicate_keys)
    except Exception as error:  # JSONDecodeError, TOMLDecodeError, yaml.YAMLError, ...
        raise ValueError(f"{p}: not a valid {what}: {error}") from error


def _json_object_without_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object as a dict; ValueError naming a key given twice."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in one object (each key once)")
        out[key] = value
    return out


def _yaml_without_duplicate_keys(text: str) -> object:
    """``yaml.safe_load(text)`` that refuses a mapping giving one key twice (a ConstructorError
    naming the key and its line); keys merged in with ``<<`` may still be overridden."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise yaml.constructor.ConstructorError(
                        problem=f"duplicate key {key!r} at line {line} (each key once)"
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=UniqueKeyLoader)


#: The shared ledger of spend windows and token pools (``ledger=`` wins): empty or ``memory``
#: (in-process, the default), ``postgresql://...`` (fleet), ``http://host:4318`` (the
#: collector's) or ``sqlite:///path`` (budgetlens.guard.ledgers).
ENV_LEDGER = "BUDGETLENS_LEDGER"

#: Seconds a ledger hold lasts without renewal (default 30): a killed worker's holds end within it.
ENV_LEDGER_LEASE_S = "BUDGETLENS_LEDGER_LEASE_S"

#: What the guard does when the ledger cannot be reached: ``block`` (default) or ``residual:F``.
ENV_LEDGER_OFFLINE = "BUDGETLENS_LEDGER_OFFLINE"
