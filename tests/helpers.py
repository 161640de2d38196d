"""Helpers shared by the tests (importable as ``helpers``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from psycopg import conninfo

HERE = Path(__file__).parent
REFERENCE_SQL = HERE / "data" / "reference-design.sql"

# Settings for the throwaway test server only: durability is not under test here, speed is.
TEST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "listen_addresses": "127.0.0.1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_db(dsn: str, dbname: str, **extra: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    params.update(extra)
    return conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None})


@dataclass(frozen=True)
class Server:
    admin_dsn: str
    tcp_port: int | None
    version_num: int

    def tcp_dsn(self, dbname: str, user: str, password: str) -> str:
        assert self.tcp_port is not None
        return conninfo.make_conninfo(
            host="127.0.0.1", port=str(self.tcp_port), dbname=dbname, user=user, password=password
        )


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


APPS = HERE / "apps"


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
