"""Helpers of the shared-ledger tests: a PostgreSQL server that can be restarted, and its ledger URL."""

from __future__ import annotations

from urllib.parse import quote

from _postgres import PostgresServer


class LedgerPostgres(PostgresServer):
    """A throwaway PostgreSQL (see ``_postgres``) with one database ``ledger`` and a restart."""

    def __enter__(self) -> LedgerPostgres:
        super().__enter__()
        self.createdb("ledger")
        return self

    @property
    def url(self) -> str:
        """``postgresql://`` URL of the ``ledger`` database over the unix socket."""
        return f"postgresql://{self.user}@/ledger?host={quote(str(self.dir), safe='')}&port={self.port}"

    def _ctl(self, *argv: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses='' -c max_connections=200"
        data = str(self.dir / "data")
        self._run(str(self.bin / "pg_ctl"), "-D", data, "-o", options, "-l", str(self.dir / "log"), *argv)

    def stop(self) -> None:
        """Stop at once (``-m immediate``: as a crash; clients see their connections drop)."""
        self._ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        self._ctl("-w", "start")
