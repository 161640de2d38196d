"""Fixtures: a real PostgreSQL for the whole run, and a fresh database for each test.

The server is the one in ``WFCTL_TEST_DSN`` when set (CI points it at Debian's PostgreSQL 15),
else an embedded PostgreSQL 18 started in a temporary directory for this run. Either way it
trusts Unix-socket connections and, where it listens on 127.0.0.1, asks TCP clients for a
password (scram-sha-256), so the authentication tests have something to fail against.

Under pytest-xdist (``pytest -n 2 --dist loadgroup``, what CI runs) every session-scoped fixture
here is per worker: each worker starts its own embedded server and makes its own template;
``WFCTL_TEST_DSN``'s server is shared, and a test marked ``alone`` runs with no other test in
flight (tests/parallel.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import parallel
import psycopg
import pytest
import servers
from helpers import (
    CEILING,
    HERE,
    LAYOUTS,
    RUN_LAYOUT,
    TEST_SETTINGS,
    Result,
    Server,
    Workers,
    free_port,
    with_db,
)
from typer.testing import CliRunner

from wfctl import embedded_proc, partitions, schema
from wfctl.cli.app import app
from wfctl.embedded import SERVER_USER
from wfctl.queries import composed

# Fixtures that a topic's tests in two tiers share (tests/support).
pytest_plugins = [
    "support.bad_input",
    "support.exact_durations",
    "support.partitions",
    "support.roles",
    "support.security",
    "support.stored_values",
    "support.transaction_step",
    "support.trusted_schema",
]


def _start_embedded(base: Path) -> servers.Embedded:
    server = servers.Embedded.init(base, "wfctl-test-server", settings=TEST_SETTINGS, port=free_port())
    hba = server.data / "pg_hba.conf"
    hba.write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
    with server.connect() as conn:
        conn.execute("SELECT pg_reload_conf()")
    return server


# -- parallel runs ---------------------------------------------------------------------------------

# An xdist worker starts with COLUMNS=80 and LINES=24 in its environment whatever the shell had,
# and wfctl's tables take their width from COLUMNS (render.PIPE_WIDTH without it): each worker
# gets the controller's values back, so a test sees the same environment on any number of workers.
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """On the xdist controller, for each worker: the terminal settings of the shell."""
    node.workerinput["wfctl_terminal_env"] = {name: os.environ.get(name) for name in TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and os.geteuid() == 0:
        # As root, the embedded servers run as a system user made on first use. Made here, once,
        # before any xdist worker starts: never by two workers at once, nor while a test adds
        # and removes a user of its own (the user database is rewritten whole each time).
        embedded_proc.ensure_user(SERVER_USER)
    if workerinput is not None:
        for name, value in workerinput["wfctl_terminal_env"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    config.addinivalue_line(
        "markers",
        "alone: under pytest-xdist on WFCTL_TEST_DSN's shared server, runs with no other test in flight",
    )
    config.addinivalue_line(
        "markers",
        "layouts: runs once on a database in each table layout (default and partitioned), in one run",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``layouts`` that gets a database (``dsn`` and what is built on it) runs in
    both layouts: the process tier runs once in CI, not once per layout as the database tier does."""
    if metafunc.definition.get_closest_marker("layouts") is not None and "dsn" in metafunc.fixturenames:
        metafunc.parametrize("layout", LAYOUTS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(HERE).as_posix() in parallel.ALONE_MODULES:
            item.add_marker(pytest.mark.alone)


@pytest.fixture(scope="session")
def run_lock(tmp_path_factory: pytest.TempPathFactory) -> parallel.RunLock | None:
    """The lock the xdist workers of this run share (None in a run on one process): the parent
    of each worker's basetemp is the run's own directory."""
    if parallel.worker_id() is None:
        return None
    return parallel.RunLock(tmp_path_factory.getbasetemp().parent / "wfctl-run-lock")


def _shared(lock: parallel.RunLock | None) -> AbstractContextManager[None]:
    return lock.shared() if lock is not None else contextlib.nullcontext()


@pytest.fixture(autouse=True)
def _server_turn(request: pytest.FixtureRequest, run_lock: parallel.RunLock | None) -> Iterator[None]:
    """Under xdist: every test holds the run's lock shared, an ``alone`` test exclusively (set
    up before and torn down after the test's other function-scoped fixtures). Only a shared
    server (``WFCTL_TEST_DSN``) needs it: an embedded server is the worker's own."""
    if run_lock is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None and bool(os.environ.get("WFCTL_TEST_DSN"))
    with run_lock.exclusive() if alone else run_lock.shared():
        yield


# -- the server and the databases --------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server(run_lock: parallel.RunLock | None) -> Iterator[Server]:
    env_dsn = os.environ.get("WFCTL_TEST_DSN")
    embedded: servers.Embedded | None = None
    if env_dsn:
        admin = env_dsn
    else:
        # Not under pytest's basetemp: a pytest session starting meanwhile (another checkout,
        # a helper) resets that tree to 0700, and the server's own user would lose its files.
        # Under xdist, one server per worker.
        home = Path(tempfile.mkdtemp(prefix="wfctl-test-pg-"))
        home.chmod(0o755)
        embedded = _start_embedded(home)
        admin = embedded.dsn("postgres")
    with _shared(run_lock), psycopg.connect(admin, autocommit=True) as conn:
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
            embedded.close()
            shutil.rmtree(embedded.base, ignore_errors=True)


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


class Templates:
    """Databases with the wfctl schema installed, one per layout, each made on first use and
    once per run (per xdist worker): each test's ``dsn`` is a copy of one (much faster than
    migrating every test's database). Made and dropped under the run's lock, so never while an
    ``alone`` test restarts a shared server."""

    def __init__(self, server: Server, lock: parallel.RunLock | None) -> None:
        self.server = server
        self.lock = lock
        self.names: dict[str, str] = {}

    def name(self, layout: str) -> str:
        if layout not in self.names:
            name = f"wfctl_tpl_{uuid.uuid4().hex[:12]}"
            with _shared(self.lock):
                with psycopg.connect(self.server.admin_dsn, autocommit=True) as conn:
                    conn.execute(composed("admin.create_database", name=name))
                self.names[layout] = name
                with psycopg.connect(with_db(self.server.admin_dsn, name), autocommit=True) as conn:
                    schema.migrate(conn)
                    if layout == "partitioned":
                        partitions.convert(conn, 1)
        return self.names[layout]

    def drop_all(self) -> None:
        with _shared(self.lock), psycopg.connect(self.server.admin_dsn, autocommit=True) as conn:
            for name in self.names.values():
                conn.execute(composed("admin.drop_database", name=name))


@pytest.fixture(scope="session")
def templates(pg_server: Server, run_lock: parallel.RunLock | None) -> Iterator[Templates]:
    made = Templates(pg_server, run_lock)
    try:
        yield made
    finally:
        made.drop_all()


@pytest.fixture
def layout(request: pytest.FixtureRequest) -> str:
    """The table layout of this test's ``dsn``: the run's (``WFCTL_TEST_LAYOUT``, default
    "default"), or each in turn for a test marked ``layouts``."""
    return getattr(request, "param", RUN_LAYOUT)


@pytest.fixture
def dsn(pg_server: Server, templates: Templates, layout: str) -> Iterator[str]:
    """A new database with the wfctl schema installed in ``layout`` (a copy of its template)."""
    name = f"wfctl_t_{uuid.uuid4().hex[:12]}"
    template = templates.name(layout)
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(composed("admin.create_database_from", name=name, template=template))
    try:
        yield with_db(pg_server.admin_dsn, name)
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            conn.execute(composed("admin.drop_database", name=name))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No wfctl or libpq settings from the outside, an empty project directory as cwd, and the
    search for wfctl.toml kept inside the test's own directory (``WFCTL_CONFIG_CEILING``): no
    config file above it (a stray /tmp/wfctl.toml) changes a test."""
    for name in list(os.environ):
        if name.startswith(("WFCTL_", "PG")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(CEILING, str(tmp_path))
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
def run_wfctl(clean_env: Path, tmp_path: Path):
    """Run wfctl as a real process (for signals, concurrency, and what a shell sees)."""

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 60, cwd: Path | None = None
    ) -> Result:
        full_env = {k: v for k, v in os.environ.items()}
        if cwd is not None and not Path(cwd).resolve().is_relative_to(tmp_path.resolve()):
            # outside the test's directory (a short path for a socket): no search above it either
            full_env[CEILING] = os.pathsep.join([str(tmp_path), str(cwd)])
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


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Workers]:
    manager = Workers(dsn, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()
