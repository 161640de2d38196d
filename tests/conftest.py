"""Fixtures: a real PostgreSQL for the whole run, and a fresh database for each test.

The server is the one in ``WFCTL_TEST_DSN`` when set (CI points it at Debian's PostgreSQL 15),
else an embedded PostgreSQL 18 started in a temporary directory for this run. Either way it
trusts Unix-socket connections and, where it listens on 127.0.0.1, asks TCP clients for a
password (scram-sha-256), so the authentication tests have something to fail against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers import APPS, TEST_SETTINGS, Result, Server, free_port, with_db
from typer.testing import CliRunner

from wfctl import schema
from wfctl.cli.app import app
from wfctl.embedded import EmbeddedServer
from wfctl.queries import composed


def _start_embedded(tmp: Path) -> tuple[EmbeddedServer, str]:
    port = free_port()
    server = EmbeddedServer(tmp / "wfctl-test-server", settings=TEST_SETTINGS, port=port)
    server.ensure_running()
    hba = server.pgdata / "pg_hba.conf"
    hba.write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    return server, server.dsn("postgres")


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env_dsn = os.environ.get("WFCTL_TEST_DSN")
    embedded: EmbeddedServer | None = None
    if env_dsn:
        admin = env_dsn
    else:
        # Not under pytest's basetemp: a pytest session starting meanwhile (another checkout,
        # a helper) resets that tree to 0700, and the server's own user would lose its files.
        home = Path(tempfile.mkdtemp(prefix="wfctl-test-pg-"))
        home.chmod(0o755)
        embedded, admin = _start_embedded(home)
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('listen_addresses'), current_setting('port')::int,"
            " current_setting('server_version_num')::int"
        ).fetchone()
        assert row is not None
        listen, port, version_num = row
    tcp = port if "127.0.0.1" in listen or listen in ("*", "localhost") else None
    try:
        yield Server(admin_dsn=admin, tcp_port=tcp, version_num=version_num)
    finally:
        if embedded is not None:
            embedded.stop()
            shutil.rmtree(embedded.home.parent, ignore_errors=True)


@pytest.fixture
def empty_dsn(pg_server: Server) -> Iterator[str]:
    """A new, empty database for this test; dropped afterwards."""
    name = f"wfctl_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(composed("admin.create_database", name=name))
    try:
        yield with_db(pg_server.admin_dsn, name)
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            conn.execute(composed("admin.drop_database", name=name))


@pytest.fixture
def dsn(empty_dsn: str) -> str:
    """A new database with the wfctl schema installed."""
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        schema.migrate(conn)
    return empty_dsn


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No wfctl or libpq settings from the outside, and an empty project directory as cwd."""
    for name in list(os.environ):
        if name.startswith(("WFCTL_", "PG")):
            monkeypatch.delenv(name)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def cli(clean_env: Path):
    """Run wfctl in-process, through the same entry point as the console script."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        result = runner.invoke(app, list(args), input=input, env=env, catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def run_wfctl(clean_env: Path):
    """Run wfctl as a real process (for signals, concurrency, and what a shell sees)."""

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 60, cwd: Path | None = None
    ) -> Result:
        full_env = {k: v for k, v in os.environ.items()}
        full_env.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "wfctl", *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=cwd or clean_env,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


class Workers:
    """Worker processes started by a test, all stopped (SIGKILL) at its end."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn = dsn
        self.log = tmp / "effects.log"
        self.gate = tmp / "gate"
        self.procs: list[subprocess.Popen[str]] = []
        self.tmp = tmp

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
        env.update(WFCTL_DSN=self.dsn, WFCTL_TEST_LOG=str(self.log), WFCTL_TEST_GATE=str(self.gate))
        env.update(extra or {})
        return env

    def start(
        self, *args: str, env: dict[str, str] | None = None, app: str = "testflows"
    ) -> subprocess.Popen[str]:
        index = len(self.procs)
        out = open(self.tmp / f"worker{index}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wfctl",
                "worker",
                "--app",
                app,
                "--poll",
                "100ms",
                "--heartbeat",
                "200ms",
                "--log-format",
                "plain",
                *args,
            ],
            cwd=APPS,
            env=self.env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        proc.log_path = self.tmp / f"worker{index}.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60, app: str = "testflows"
    ) -> str:
        """A --burst worker run to completion; returns its log."""
        proc = self.start("--burst", *args, env=env, app=app)
        code = proc.wait(timeout=timeout)
        text = proc.log_path.read_text()  # type: ignore[attr-defined]
        assert code == 0, text
        return text

    def wfctl(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "wfctl", *args],
            cwd=APPS,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def effects(self) -> list[tuple[str, str]]:
        if not self.log.exists():
            return []
        text = self.log.read_text()
        complete = text[: text.rfind("\n") + 1]  # workers may be appending: skip a half line
        return [tuple(line.split(" ", 1)) for line in complete.splitlines()]  # type: ignore[misc]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    manager = Workers(dsn, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()
