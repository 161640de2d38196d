"""wfctl through PgBouncer (Debian's 1.18) in transaction pooling mode.

In transaction pooling, each transaction may run on another server connection, shared with
other clients. Two things a direct connection has are then gone (PgBouncer 1.18):

- LISTEN runs on whatever server connection the transaction got; notifications for it arrive on
  that server connection later, when it is idle in the pool or serves someone else, and
  PgBouncer drops them ("got packet 'A' from server when not linked"). LISTEN is accepted, but
  no notification ever arrives (``test_listen_through_transaction_pooling_loses_notifications``).
- Session state: a prepared statement (psycopg prepares a query after 5 executions) exists on
  one server connection only, and stays there for the next client; a session ``SET`` leaks too.

So a worker behind a transaction pooler must run with ``--no-listen`` (or ``[worker] listen =
false``: poll only, no prepared statements, no session SET); the tests here show that it then
works, crash and recovery included, and that the operator commands work through the pooler too.

Without it, a worker today starts normally (``wakeup=listen+poll``), leaves ``SET
plan_cache_mode``, a LISTEN and soon its prepared statements on the shared server connections,
and after a few dozen statements fails with ``database error: prepared statement "_pg3_0" does
not exist`` (or ``already exists``, when another client's statement of the same name is on the
server connection), logging its running workflows as "lease lost" and exiting 1.
``test_worker_without_no_listen_through_pgbouncer_works_or_refuses_clearly`` states what it
should do instead: detect the pooler and poll, or refuse to start with a message naming
--no-listen.

The server and PgBouncer are the module's own (``servers``), independent of the suite's server.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import servers
from helpers import LogWindow, Result, Workers, isolated_env, rows, wait_for, wfctl_command

import wfctl
from wfctl import schema

POOL_SIZE = 2  # server connections per database: fewer than the workers, so they share them
# under pytest-xdist (--dist loadgroup) the module runs on one worker: one set of servers, not one per worker
pytestmark = pytest.mark.xdist_group("pgbouncer")


@dataclass
class Bounced:
    server: servers.Postgres
    bouncer: servers.PgBouncer


@pytest.fixture(scope="module")
def bounced() -> Iterator[Bounced]:
    servers.require_postgres()
    servers.require_pgbouncer()
    base = servers.make_base("wfctl-pgbouncer-")
    with contextlib.ExitStack() as stack:
        stack.callback(servers.remove, base)
        server = stack.enter_context(servers.Postgres.init(base, settings=servers.FAST))
        bouncer = stack.enter_context(servers.PgBouncer(server, pool_size=POOL_SIZE))
        yield Bounced(server, bouncer)


@pytest.fixture
def database(bounced: Bounced) -> str:
    """A new, empty database on the module's server (reachable through its PgBouncer)."""
    name = f"wfctl_pgb_{uuid.uuid4().hex[:10]}"
    bounced.server.create_database(name)
    return name


@pytest.fixture
def bouncer_dsn(bounced: Bounced, database: str) -> str:
    """The DSN of a new database with the schema, through PgBouncer."""
    dsn = bounced.bouncer.dsn(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.migrate(conn)
    return dsn


@pytest.fixture
def bworkers(bouncer_dsn: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes (and wfctl commands) whose WFCTL_DSN goes through PgBouncer."""
    manager = Workers(bouncer_dsn, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


def counts(effects: list[tuple[str, str]], wid: str) -> dict[str, int]:
    return dict(collections.Counter(step for w, step in effects if w == wid))


ERRORS = (
    "prepared statement",
    "ERROR",
    "FATAL",
    "error:",
    "Traceback",
    "not linked",  # PgBouncer: a NOTIFY for a LISTEN left on a pooled server connection
    "lost the database connection",
    "lease lost",
    "internal error",
)


def problems(text: str, *, warnings: bool = True) -> list[str]:
    """Lines of a worker, PgBouncer or server log that show something went wrong (with
    ``warnings``, any WARNING too)."""
    needles = (*ERRORS, "WARNING") if warnings else ERRORS
    return [line for line in text.splitlines() if any(n in line for n in needles)]


CLEAN = (0, 0, "auto")


def pooled_state(bouncer: servers.PgBouncer, database: str) -> list[tuple[int, int, str]]:
    """The session state left on each of the pool's server connections: (prepared statements,
    LISTEN channels, plan_cache_mode). Holding a transaction open on POOL_SIZE client
    connections at once pins each to its own server connection, so all of them are seen."""
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(psycopg.connect(bouncer.dsn(database))) for _ in range(POOL_SIZE)]
        found = [
            conn.execute(
                "SELECT pg_backend_pid(), (SELECT count(*) FROM pg_prepared_statements),"
                " (SELECT count(*) FROM pg_listening_channels()), current_setting('plan_cache_mode')"
            ).fetchone()
            for conn in conns
        ]
    assert len({row[0] for row in found}) == POOL_SIZE  # type: ignore[index]
    return [tuple(row[1:]) for row in found]  # type: ignore[index, misc]


def jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(n)))
    return path


def submit_file(workers: Workers, workflow_type: str, path: Path) -> list[str]:
    result = workers.wfctl("submit", workflow_type, "--input-file", str(path), "--force")
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def pool_stats(bouncer: servers.PgBouncer, database: str) -> dict[str, object]:
    (stats,) = [s for s in bouncer.show("STATS") if s["database"] == database]
    return stats


# -- the worker with --no-listen ------------------------------------------------------------------


@pytest.mark.slow
def test_no_listen_workers_complete_a_batch_through_pgbouncer(bounced, database, bworkers):
    server_log = LogWindow(bounced.server.log)
    bouncer_log = LogWindow(bounced.bouncer.log)
    ids = submit_file(bworkers, "three", jsonl(bworkers.tmp / "in.jsonl", 300))
    assert len(ids) == 300
    started = time.monotonic()
    procs = [bworkers.start("--no-listen", "--burst", "--concurrency", "4", "--quiet") for _ in range(3)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.log_path.read_text()
    elapsed = time.monotonic() - started
    dsn = bworkers.dsn
    assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 300)]
    assert rows(dsn, "SELECT count(*), count(DISTINCT (workflow_id, step_number)) FROM workflow_steps") == [
        (900, 900)
    ]
    effects = bworkers.effects()
    assert len(effects) == 900 and len(set(effects)) == 900, "a step ran twice"
    for proc in procs:
        log = proc.log_path.read_text()
        assert "wakeup=poll only" in log
        assert problems(log) == [], log
    # nothing went wrong on the server or in PgBouncer (prepared statements, session state, a
    # NOTIFY arriving for a LISTEN that some client left on a pooled server connection)
    assert problems(server_log.new()) == []
    assert problems(bouncer_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE
    # the traffic went through PgBouncer, and 3 workers shared at most POOL_SIZE server backends
    stats = pool_stats(bounced.bouncer, database)
    assert int(stats["total_xact_count"]) > 0
    with bounced.server.connect() as conn:
        backends = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()[0]  # type: ignore[index]
    assert 1 <= backends <= POOL_SIZE
    servers_used = backends
    print(
        f"\npgbouncer batch: 300 workflows, 900 steps, 3 workers x 4 slots over {servers_used}"
        f" server connection(s), {stats['total_xact_count']} transactions, {elapsed:.2f}s"
    )


@pytest.mark.slow
def test_crash_mid_step_through_pgbouncer(bounced, database, bworkers):
    dsn = bworkers.dsn
    server_log = LogWindow(bounced.server.log)
    bworkers.gate.touch()
    result = bworkers.wfctl("submit", "three", '{"gate": 2}', "--force")
    assert result.exit_code == 0, result.output
    wid = result.stdout.strip()
    proc = bworkers.start("--no-listen")
    wait_for(lambda: counts(bworkers.effects(), wid).get("two"), what="step 2 to start")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("running",)]

    def recovered() -> str | None:
        out = bworkers.wfctl("recover", "--stale", "1s")  # through PgBouncer too
        assert out.exit_code == 0, out.output
        return out.stdout if wid in out.stdout else None

    out = wait_for(recovered, timeout=30, what=f"recover to requeue {wid}")
    assert "requeued" in out and "attempt=2" in out
    bworkers.gate.unlink()
    log = bworkers.run("--no-listen")
    assert problems(log) == [], log
    assert rows(dsn, "SELECT status, output_data FROM workflows WHERE id = %s", wid) == [
        ("completed", {"sum": 6})
    ]
    assert counts(bworkers.effects(), wid) == {"one": 1, "two": 2, "three": 1}
    assert rows(
        dsn,
        "SELECT step_number, count(*) FROM workflow_steps WHERE workflow_id = %s GROUP BY 1 ORDER BY 1",
        wid,
    ) == [(1, 1), (2, 1), (3, 1)]
    assert rows(dsn, "SELECT attempt, lease_epoch FROM workflows WHERE id = %s", wid) == [(2, 3)]
    assert problems(server_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE


def test_worker_told_by_the_config_file_to_poll_through_pgbouncer(bounced, database, bworkers):
    """`[worker] listen = false` in wfctl.toml is the same as --no-listen."""
    config = bworkers.tmp / "wfctl.toml"
    config.write_text("[worker]\nlisten = false\n")
    server_log = LogWindow(bounced.server.log)
    submit_file(bworkers, "three", jsonl(bworkers.tmp / "in.jsonl", 60))
    procs = [bworkers.start("--burst", env={"WFCTL_CONFIG": str(config)}) for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.log_path.read_text()
        log = proc.log_path.read_text()
        assert "wakeup=poll only" in log and problems(log) == [], log
    assert rows(bworkers.dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 60)]
    assert problems(server_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE


# -- the operator commands --------------------------------------------------------------------------


def wfctl_in(cwd: Path, dsn: str, *args: str) -> Result:
    return wfctl_command(*args, env=isolated_env(WFCTL_DSN=dsn), cwd=cwd)


@pytest.mark.slow
def test_operator_commands_through_pgbouncer(bounced, database, tmp_path):
    dsn = bounced.bouncer.dsn(database)
    server_log = LogWindow(bounced.server.log)

    def ok(*args: str) -> Result:
        result = wfctl_in(tmp_path, dsn, *args)
        assert result.exit_code == 0, (args, result.output)
        assert "Traceback" not in result.output
        return result

    assert "installed schema version" in ok("init").stderr
    assert "up to date" in ok("init").stderr
    wid = ok("submit", "three", '{"n": 1}', "--force").stdout.strip()
    first = ok("submit", "three", "{}", "--key", "k-1", "--force").stdout.strip()
    again = ok("submit", "three", "{}", "--key", "k-1", "--force")
    assert again.stdout.strip() == first and "used before" in again.stderr
    ids = ok("submit", "three", "--input-file", str(jsonl(tmp_path / "in.jsonl", 50)), "--force")
    assert len(ids.stdout.split()) == 50
    assert json.loads(ok("stats", "--json").stdout)
    listed = json.loads(ok("list", "--json", "--limit", "100").stdout)
    assert len(listed) == 52 and wid in json.dumps(listed)
    assert wid in ok("show", wid).stdout
    assert ok("recover", "--stale", "1s").output == ""  # nothing running: silent, as for cron

    workers = Workers(dsn, tmp_path)
    try:
        log = workers.run("--no-listen", "--concurrency", "4")
    finally:
        workers.stop_all()
    assert problems(log) == [], log
    assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 52)]
    stats = json.loads(ok("stats", "--json").stdout)
    assert "three" in json.dumps(stats)
    assert ok("workers").stdout
    assert ok("recover", "--stale", "1s").output == ""
    assert problems(server_log.new()) == []


@pytest.mark.slow
def test_bulk_submits_through_pgbouncer_leave_no_prepared_statement(bounced, database, tmp_path):
    """`wfctl submit --input-file` runs one INSERT per batch of SUBMIT_BATCH lines; psycopg
    prepares a statement run 5 times, and in transaction pooling that prepared statement stays
    on the server connection for the next client, whose own `_pg3_0` then collides with it."""
    from wfctl.cli.submit import SUBMIT_BATCH

    # one server connection: each client gets the one the previous client used
    with servers.PgBouncer(bounced.server, pool_size=1, name=f"pool1-{database}") as bouncer:
        dsn = bouncer.dsn(database)
        assert wfctl_in(tmp_path, dsn, "init").exit_code == 0
        path = jsonl(tmp_path / "big.jsonl", 8 * SUBMIT_BATCH)
        for _ in range(2):
            result = wfctl_in(tmp_path, dsn, "submit", "three", "--input-file", str(path), "--force")
            assert result.exit_code == 0, result.output
        assert rows(dsn, "SELECT count(*) FROM workflows") == [(16 * SUBMIT_BATCH,)]


# -- without --no-listen ---------------------------------------------------------------------------


def test_listen_through_transaction_pooling_loses_notifications(bounced, database):
    """Why the worker needs --no-listen behind PgBouncer: LISTEN is accepted, but the
    notification arrives on a server connection that is back in the pool, and is dropped."""
    bouncer_log = LogWindow(bounced.bouncer.log)
    channel = f"wfctl_t_{uuid.uuid4().hex[:8]}"
    with (
        psycopg.connect(bounced.bouncer.dsn(database), autocommit=True) as listener,
        bounced.server.connect(database) as direct,
    ):
        listener.execute(f"LISTEN {channel}")  # accepted: no error
        direct.execute("SELECT pg_notify(%s, 'hello')", (channel,))
        wait_for(lambda: "not linked" in bouncer_log.new(), timeout=10, what="PgBouncer to drop it")
        assert list(listener.notifies(timeout=0.5)) == []
    # the same through a direct connection arrives at once
    with bounced.server.connect(database) as listener, bounced.server.connect(database) as direct:
        listener.execute(f"LISTEN {channel}")
        direct.execute("SELECT pg_notify(%s, 'hello')", (channel,))
        assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["hello"]


@pytest.mark.slow
def test_worker_without_no_listen_through_pgbouncer_works_or_refuses_clearly(bounced, database, bworkers):
    """A worker started without --no-listen behind a transaction pooler must not fail halfway
    through its work with a driver error: either it detects the pooler and polls without
    prepared statements (and completes everything), or it refuses at start, before claiming
    anything, with a message that names --no-listen."""
    dsn = bworkers.dsn
    server_log = LogWindow(bounced.server.log)
    bouncer_log = LogWindow(bounced.bouncer.log)
    submit_file(bworkers, "three", jsonl(bworkers.tmp / "in.jsonl", 300))
    procs = [bworkers.start("--burst", "--concurrency", "4") for _ in range(3)]
    codes = [proc.wait(timeout=60) for proc in procs]
    logs = [proc.log_path.read_text() for proc in procs]
    for code, log in zip(codes, logs, strict=True):
        if code == 0:  # a warning that it polls because of the pooler is welcome
            assert problems(log, warnings=False) == [], log
        else:
            assert "--no-listen" in log, log
            assert "started" not in log and "lease lost" not in log, log
    # no prepared statement, SET or LISTEN reached the pooled server connections
    assert problems(server_log.new()) == []
    assert problems(bouncer_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE
    if all(code == 0 for code in codes):
        assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 300)]
    else:
        assert rows(dsn, "SELECT status, max(lease_epoch), count(*) FROM workflows GROUP BY 1") == [
            ("pending", 0, 300)
        ]


def test_messages_children_and_results_through_pgbouncer(bounced, database, bworkers):
    """Coordination in transaction pooling: the worker's step functions are single statements,
    a send is one, and wfctl.result polls (no LISTEN through the pooler)."""
    dsn = bworkers.dsn
    server_log = LogWindow(bounced.server.log)
    proc = bworkers.start("--no-listen", app="coordengine")
    inbox = wfctl.submit(dsn, "inbox", {"count": 1})
    parent = wfctl.submit(dsn, "bulk", {"n": 20})
    wait_for(
        lambda: rows(dsn, "SELECT wait_kind FROM workflows WHERE id = %s", inbox) == [("message",)],
        what="parked on a message",
    )
    wfctl.send(dsn, inbox, "go", "through the pooler")
    assert wfctl.result(dsn, inbox, timeout=30) == {"got": ["through the pooler"]}
    assert wfctl.result(dsn, parent, timeout=30) == sum(2 * n for n in range(20))
    proc.kill()
    proc.wait(timeout=10)
    assert problems(proc.log_path.read_text()) == []
    assert problems(server_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE


def test_transactional_steps_through_pgbouncer(bounced, database, bworkers):
    """ctx.transaction in transaction pooling: the application's writes commit with their
    checkpoints, once each, and the pooled server connections keep nothing of it (no prepared
    statement, and the SET LOCAL timeouts ended with their transactions)."""
    dsn = bworkers.dsn
    server_log = LogWindow(bounced.server.log)
    with bounced.server.connect(database) as direct:
        direct.execute("CREATE TABLE app_ledger (workflow_id uuid NOT NULL, entry int NOT NULL)")
    procs = [bworkers.start("--no-listen", "--concurrency", "4", app="txflows") for _ in range(2)]
    ids = [wfctl.submit(dsn, "ledger", {"entries": 10, "pause": 0}) for _ in range(6)]
    for wid in ids:
        assert wfctl.result(dsn, wid, timeout=60) == sum(range(10))
    ledger = rows(dsn, "SELECT workflow_id, entry FROM app_ledger")
    assert len(ledger) == len(set(ledger)) == 60
    assert set(ledger) == {(wid, n) for wid in ids for n in range(10)}
    assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE step_name LIKE 'debit-%%'") == [(60,)]
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        assert problems(proc.log_path.read_text()) == []
    assert problems(server_log.new()) == []
    assert pooled_state(bounced.bouncer, database) == [CLEAN] * POOL_SIZE
    with contextlib.ExitStack() as stack:
        conns = [
            stack.enter_context(psycopg.connect(bounced.bouncer.dsn(database))) for _ in range(POOL_SIZE)
        ]
        settings = [
            conn.execute(
                "SELECT pg_backend_pid(), current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('statement_timeout')"
            ).fetchone()
            for conn in conns
        ]
    assert len({s[0] for s in settings}) == POOL_SIZE  # type: ignore[index]
    assert [s[1:] for s in settings] == [("0", "0")] * POOL_SIZE  # type: ignore[index]
