"""Helpers of the shared-ledger tests: a PostgreSQL server that can be restarted, and its ledger URL."""

from __future__ import annotations

from urllib.parse import quote

from _postgres import PostgresServer


class LedgerPostgres(PostgresServer):
    """A throwaway PostgreSQL (see ``_postgres``) with one database ``ledger`` and a restart.

    ``fsync=off``: a stop with ``-m immediate`` is a crash of the server (not of the machine), so
    committed rows survive it in the page cache; without it, crash recovery's fsync of the data
    directory takes seconds on a loaded machine."""

    def __enter__(self) -> LedgerPostgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", self.user)
        self.start()
        self.createdb("ledger")
        return self

    @property
    def url(self) -> str:
        """``postgresql://`` URL of the ``ledger`` database over the unix socket."""
        return f"postgresql://{self.user}@/ledger?host={quote(str(self.dir), safe='')}&port={self.port}"

    def _ctl(self, *argv: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses='' -c max_connections=200 -c fsync=off"
        data = str(self.dir / "data")
        self._run(str(self.bin / "pg_ctl"), "-D", data, "-o", options, "-l", str(self.dir / "log"), *argv)

    def stop(self) -> None:
        """Stop at once (``-m immediate``: as a crash; clients see their connections drop)."""
        self._ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        self._ctl("-w", "start")
