"""A throwaway PostgreSQL server for DuckLake tests and benchmarks (Debian's PostgreSQL 15).

``initdb`` into a temporary directory, ``pg_ctl start`` on a free port, listening only on a unix
socket in that directory (trust authentication: nothing leaves the machine). As root the server
runs as the ``postgres`` user (PostgreSQL refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def postgres_bin() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: ``$PG_BIN``, else the newest Debian install, else PATH."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """``with PostgresServer() as pg: pg.location("db1", data_dir)`` -> a ducklake: location."""

    def __init__(self):
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql); set PG_BIN")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="budgetlens-pg-"))
        self.port = _free_port()
        self.user = "postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        else:
            self.user = os.environ.get("USER", "postgres")

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, capture_output=True, text=True)

    def __enter__(self) -> PostgresServer:
        data = self.dir / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-A", "trust", "-U", self.user, "-E", "UTF8")
        self.start()
        return self

    def start(self) -> None:
        """Start the server (again, after ``stop``) on the same port and socket directory."""
        data = self.dir / "data"
        options = f"-p {self.port} -k {self.dir} -c listen_addresses='' -c max_connections=200"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once (clients are disconnected; ``start`` brings it back)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")

    def createdb(self, name: str) -> None:
        self._run(
            str(self.bin / "createdb"), "-h", str(self.dir), "-p", str(self.port), "-U", self.user, name
        )

    def location(self, dbname: str, data_path: str | os.PathLike) -> str:
        """A new database ``dbname`` and the ducklake: location of a lake in it."""
        self.createdb(dbname)
        return (
            f"ducklake:postgres:dbname={dbname} host={self.dir} port={self.port} user={self.user}"
            f"?data_path={data_path}/"
        )

    def __exit__(self, *exc) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
