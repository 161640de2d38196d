"""Helpers shared by the tests and the chaos run (importable as ``helpers``: pytest puts tests/
on sys.path, and so does Python for a script run from there, such as ``python tests/chaos.py``).
Nothing here imports pytest."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

HERE = Path(__file__).parent
REPO = HERE.parent
REFERENCE_SQL = HERE / "data" / "reference-design.sql"
APPS = HERE / "apps"
#: The table layouts a test database can be in, and the run's (``WFCTL_TEST_LAYOUT``): every test
#: database is in it, except those of a test marked ``layouts`` (tests/conftest.py).
LAYOUTS = ("default", "partitioned")
RUN_LAYOUT = os.environ.get("WFCTL_TEST_LAYOUT") or "default"
assert RUN_LAYOUT in LAYOUTS, f"WFCTL_TEST_LAYOUT={RUN_LAYOUT!r}: one of {', '.join(LAYOUTS)}"
PARTITIONED_RUN = RUN_LAYOUT == "partitioned"

# Settings for a throwaway server where durability is not under test: speed first.
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
# The suite's own throwaway server: fast, many connections, and TCP on loopback (where the
# authentication tests ask for a password).
TEST_SETTINGS = {**FAST, "max_connections": "300", "listen_addresses": "127.0.0.1"}


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


# -- processes ------------------------------------------------------------------------------------


#: The variable that keeps wfctl's search for wfctl.toml from going above a directory.
CEILING = "WFCTL_CONFIG_CEILING"


def isolated_env(**extra: str) -> dict[str, str]:
    """This process's environment without any ``WFCTL_*`` or ``PG*`` variable, so that a child
    connects where the test says and not where the developer's shell points; plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
    env.update(extra)
    return env


def hermetic(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """``env`` with the config search kept to ``cwd`` (unless the test set a ceiling itself):
    no wfctl.toml above the directory a child runs in (a stray /tmp/wfctl.toml, a file in a
    parent of the checkout) changes what it does."""
    return {CEILING: str(cwd), **env}


def wfctl_command(*args: str, env: dict[str, str], cwd: Path = APPS, timeout: float = 60) -> Result:
    """Run ``python -m wfctl ARGS`` to its end (from ``tests/apps`` unless told otherwise)."""
    proc = subprocess.run(
        [sys.executable, "-m", "wfctl", *args],
        cwd=cwd,
        env=hermetic(env, cwd),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def wfctl_process(
    args: list[str], *, env: dict[str, str], log_path: Path, cwd: Path = APPS
) -> subprocess.Popen[bytes]:
    """Start ``python -m wfctl ARGS`` (a worker) from ``tests/apps``, its stdout and stderr
    written to ``log_path``."""
    with open(log_path, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "wfctl", *args],
            cwd=cwd,
            env=hermetic(env, cwd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def freeze(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGSTOP ``proc`` and wait until every one of its threads has stopped. kill() returns
    when the signal is queued; a thread the kernel has not yet scheduled to take it may still
    read a reply and send its next statement, so a test that releases a lock right after the
    signal could watch the frozen process act."""
    import signal

    proc.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")

    def stopped() -> bool:
        states = []
        for task in tasks.iterdir():
            try:  # "pid (comm) S ...": the state follows the last ')'
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
        return bool(states) and all(state in ("T", "t") for state in states)

    wait_for(stopped, timeout=timeout, what=f"process {proc.pid} to stop on SIGSTOP")


def run_benchmark(module: str, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` from the tree's root, its output captured; past ``timeout``,
    SIGTERM it (so that it stops its workers and drops its databases on the way out) and fail.
    The timeout is a guard against a hang, not a speed limit."""
    import signal

    with subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
            raise AssertionError(f"the benchmark took more than {timeout:.0f} s:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- reading what the database and the processes wrote --------------------------------------------


def rows(dsn: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """All rows of one statement, on a connection of its own."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql, params or None).fetchall()  # type: ignore[arg-type]


def wait_for_worker_session(dsn: str, condition: str, timeout: float = 30.0, what: str = "") -> None:
    """Poll pg_stat_activity until a ``wfctl worker`` session of ``dsn``'s database meets
    ``condition`` (SQL on pg_stat_activity's columns: ``wait_event_type = 'Lock'``, blocked on a
    row the test holds; ``state = 'idle in transaction'``, frozen inside its transaction); fail
    the test after ``timeout``. A worker that waits for the listening duty (an advisory lock,
    wfctl/worker/listening.py) is not blocked on anything the test holds, and never counts."""
    wait_for(
        lambda: rows(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'wfctl worker' AND wait_event IS DISTINCT FROM 'advisory'"
            f" AND {condition}",
        )[0][0],
        timeout=timeout,
        what=what or f"a worker's session with {condition}",
    )


def complete_lines(path: Path) -> list[str]:
    """The lines of a file that processes may still be appending to, up to its last complete
    line (a half-written last line is read next time)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return text[: text.rfind("\n") + 1].splitlines()


class LogWindow:
    """What a log gained since this object was made (``read`` returns the whole log)."""

    def __init__(self, read: Callable[[], str]) -> None:
        self.read = read
        self.start = len(read())

    def new(self) -> str:
        return self.read()[self.start :]


class Workers:
    """Worker processes started by a test, all stopped (SIGKILL) at its end."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        self.dsn = dsn
        self.log = tmp / "effects.log"
        self.gate = tmp / "gate"
        self.procs: list[subprocess.Popen[str]] = []
        self.tmp = tmp

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = isolated_env(WFCTL_DSN=self.dsn, WFCTL_TEST_LOG=str(self.log), WFCTL_TEST_GATE=str(self.gate))
        env.update(extra or {})
        return env

    def start(
        self, *args: str, env: dict[str, str] | None = None, app: str = "testflows"
    ) -> subprocess.Popen[bytes]:
        log_path = self.tmp / f"worker{len(self.procs)}.log"
        worker = ["worker", "--app", app, "--poll", "100ms", "--heartbeat", "200ms", "--log-format", "plain"]
        proc = wfctl_process([*worker, *args], env=self.env(env), log_path=log_path)
        proc.log_path = log_path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def wait_ready(self, count: int = 1) -> None:
        """Until ``count`` workers have registered (their row: they claim from then on). A test
        whose run has a deadline of seconds submits after this, not while a loaded machine
        still starts the worker's process."""
        wait_for(
            lambda: rows(self.dsn, "SELECT count(*) FROM workers WHERE stopped_at IS NULL")[0][0] >= count,
            what=f"{count} worker(s) to register",
        )

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
        return wfctl_command(*args, env=self.env(env), timeout=timeout)

    def effects(self) -> list[tuple[str, str]]:
        # workers may be appending: a half-written last line is read next time
        return [tuple(line.split(" ", 1)) for line in complete_lines(self.log)]  # type: ignore[misc]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
