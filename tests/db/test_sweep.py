"""Recovery without cron: live workers sweep the runs of workers that missed their heartbeats,
each judged by its own recorded interval, one sweeper at a time.

Here the duty's schedule on a fake clock and the sweep statement on a real database (the
per-worker rule, the lock, concurrent sweepers). The tests with real worker processes (a
SIGKILLed worker's run resumed by a survivor, a live worker's long step never swept, a frozen
worker fenced out when it wakes) are in tests/process/test_sweep_workers.py."""

from __future__ import annotations

import io
import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from helpers import rows

from wfctl import recovery
from wfctl.recovery import Recovered
from wfctl.worker.log import WorkerLog
from wfctl.worker.options import WorkerOptions
from wfctl.worker.sweep import SweepDuty


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


#: What a sweeper holds while it sweeps (the first CTE of recovery.recover, for a sweep).
SWEEP_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('wfctl.sweep.' || current_schema()))"


def recovered(wid: uuid.UUID, status: str = "pending") -> Recovered:
    beat = datetime(2026, 12, 2, 17, 0, 0, tzinfo=UTC)
    return Recovered(wid, "order", status, 2, 3, 1, "host:1:abc", beat)


def test_sweep_duty_waits_its_dead_after_then_sweeps_every_interval_and_logs_each_run():
    clock = FakeClock()
    stream = io.StringIO()
    found: list[list[Recovered] | None] = []
    calls: list[float] = []
    stopping = [False]

    def sweep_once() -> list[Recovered] | None:
        calls.append(clock.now)
        return found.pop(0) if found else []

    from wfctl.worker.duties import Duties

    duties = Duties(clock)
    duties.add(SweepDuty(2.0, 6.0, sweep_once, WorkerLog("plain", stream), start=clock.now))
    sweep = duties.items[0]
    assert isinstance(sweep, SweepDuty)
    sweep.active = lambda: not stopping[0]
    # a worker that just started gives the others its own dead_after to beat before it sweeps
    assert duties.run_due() == [] and duties.next_due() == clock.now + 6.0
    clock.now += 5.9
    assert duties.run_due() == []
    clock.now += 0.1
    a, b = uuid.uuid4(), uuid.uuid4()
    found.extend([[recovered(a), recovered(b, "failed")], None])
    assert duties.run_due() == ["sweep"] and calls == [clock.now]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert f"recovered {a} requeued: its worker host:1:abc stopped heartbeating" in lines[0]
    assert "WARNING" in lines[0] and "attempt=2" in lines[0] and "type=order" in lines[0]
    assert f"failed    {b} failed: its worker host:1:abc stopped heartbeating" in lines[1]
    assert "ERROR" in lines[1] and "no retries left" in lines[1]
    assert sweep.requeued == 2
    # then every interval; a turn another worker is sweeping (None) is skipped quietly
    assert duties.next_due() == clock.now + 2.0
    clock.now += 2.0
    assert duties.run_due() == ["sweep"] and sweep.skipped == 1
    assert len(stream.getvalue().splitlines()) == 2
    # after its own reconnect: no sooner than dead_after from then
    clock.now += 1.0
    sweep.postpone(clock.now)
    assert sweep.next_at == clock.now + 6.0
    clock.now += 5.0
    assert duties.run_due() == []
    # a stopping worker does not sweep, and is not woken up for it
    stopping[0] = True
    clock.now += 10.0
    before = len(calls)
    duties.run_due()
    assert len(calls) == before and duties.next_due() == float("inf")


def test_dead_after_is_the_heartbeat_times_the_missed_beats_but_at_least_a_second():
    assert WorkerOptions().dead_after == 30.0
    assert WorkerOptions(heartbeat=2.0, missed_beats=5).dead_after == 10.0
    assert WorkerOptions(heartbeat=0.2).dead_after == 1.0


def add_worker(conn, ident: str, *, silent: float, dead_after: float | None, stopped: bool = False) -> None:
    columns = "id, hostname, pid, concurrency, heartbeat_at, stopped_at"
    values = "%(id)s, 'h', 1, 4, now() - make_interval(secs => %(silent)s), %(stopped)s"
    if dead_after is not None:
        columns += ", heartbeat_seconds, dead_after_seconds"
        values += ", %(dead_after)s / 3, %(dead_after)s"
    conn.execute(
        f"INSERT INTO workers ({columns}) VALUES ({values})",
        {
            "id": ident,
            "silent": silent,
            "dead_after": dead_after,
            "stopped": datetime.now(UTC) if stopped else None,
        },
    )


def add_run(conn, owner: str, *, moved: float = 3600.0) -> uuid.UUID:
    """A running workflow of ``owner`` whose row last moved ``moved`` seconds ago."""
    row = conn.execute(
        "INSERT INTO workflows (workflow_type, status, lease_owner, lease_epoch, max_retries,"
        " updated_at) VALUES ('order', 'running', %s, 1, 3, now() - make_interval(secs => %s))"
        " RETURNING id",
        (owner, moved),
    ).fetchone()
    return row[0]


def test_sweep_judges_each_worker_by_its_own_recorded_heartbeat(dsn, conn):
    add_worker(conn, "late:1:a", silent=5, dead_after=3)  # 5 s silent, dead after 3: dead
    add_worker(conn, "slow:2:b", silent=5, dead_after=30)  # 5 s silent, allowed 30: live
    add_worker(conn, "legacy:3:c", silent=120, dead_after=None)  # before 0004: judged at 5m
    add_worker(conn, "gone:4:d", silent=1, dead_after=30, stopped=True)
    dead = add_run(conn, "late:1:a")
    moved = add_run(conn, "late:1:a", moved=1)  # a checkpoint a second ago: not stale yet
    alive = add_run(conn, "slow:2:b")
    legacy = add_run(conn, "legacy:3:c")
    stopped = add_run(conn, "gone:4:d")
    orphan = add_run(conn, "never-registered:5:e")

    assert {r.id for r in recovery.recover(conn, None, dry_run=True)} == {dead, stopped, orphan}
    swept = recovery.sweep(conn)
    assert swept is not None and {r.id for r in swept} == {dead, stopped, orphan}
    states = dict(rows(dsn, "SELECT id, status || ':' || attempt || ':' || lease_epoch FROM workflows"))
    assert states == {
        dead: "pending:2:2",
        stopped: "pending:2:2",
        orphan: "pending:2:2",
        moved: "running:1:1",
        alive: "running:1:1",
        legacy: "running:1:1",
    }
    # an explicit threshold (`recover --stale 60s`) judges everyone by it
    assert {r.id for r in recovery.recover(conn, timedelta(seconds=60))} == {legacy}


def test_one_sweeper_at_a_time(dsn, conn):
    add_worker(conn, "late:1:a", silent=10, dead_after=3)
    wid = add_run(conn, "late:1:a")
    with psycopg.connect(dsn) as holder:  # another worker in the middle of its sweep
        assert holder.execute(SWEEP_LOCK).fetchone() == (True,)
        assert recovery.sweep(conn) is None  # skips its turn at once, changes nothing
        assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("running",)]
        holder.rollback()
    swept = recovery.sweep(conn)
    assert swept is not None and [r.id for r in swept] == [wid]
    assert recovery.sweep(conn) == []


class PausingConnection:
    """A connection that calls ``pause`` after each statement it runs: the moment a sweeper
    frozen by SIGSTOP (or a partition) between two statements would be in."""

    def __init__(self, conn: psycopg.Connection, pause) -> None:
        self._conn, self._pause = conn, pause

    def __getattr__(self, name: str):
        return getattr(self._conn, name)

    def execute(self, *args, **kwargs):
        result = self._conn.execute(*args, **kwargs)
        self._pause()
        return result

    def cursor(self, *args, **kwargs):
        return PausingCursor(self._conn.cursor(*args, **kwargs), self._pause)


class PausingCursor:
    def __init__(self, cur: psycopg.Cursor, pause) -> None:
        self._cur, self._pause = cur, pause

    def __getattr__(self, name: str):
        return getattr(self._cur, name)

    def __enter__(self) -> PausingCursor:
        self._cur.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.__exit__(*exc)  # type: ignore[arg-type]

    def execute(self, *args, **kwargs) -> PausingCursor:
        self._cur.execute(*args, **kwargs)
        self._pause()
        return self


def test_a_sweeper_paused_between_statements_holds_nothing(dsn):
    """Whenever a sweeper stops between two of its statements, another worker can take the
    sweep lock and the rows it requeued at once (a stateful-test counterexample: the sweep was
    a transaction of several statements, and a worker frozen between them blocked every other
    sweep, and `recover` on those rows, until it was resumed)."""
    seen: list[tuple[bool, str | None]] = []
    with psycopg.connect(dsn, autocommit=True) as sweeper, psycopg.connect(dsn, autocommit=True) as other:
        add_worker(sweeper, "late:9:a", silent=10, dead_after=3)
        wid = add_run(sweeper, "late:9:a")

        def meanwhile() -> None:
            with other.transaction():
                locked = other.execute(SWEEP_LOCK).fetchone()[0]
                row = other.execute(
                    "SELECT status FROM workflows WHERE id = %s FOR UPDATE SKIP LOCKED", (wid,)
                ).fetchone()
            seen.append((locked, row[0] if row else None))

        swept = recovery.sweep(PausingConnection(sweeper, meanwhile))  # type: ignore[arg-type]
        assert swept is not None and [r.id for r in swept] == [wid]
    assert seen and all(seen_lock for seen_lock, _ in seen), seen
    assert all(status is not None for _, status in seen), f"the requeued row was held: {seen}"


def test_concurrent_sweepers_requeue_each_run_once(dsn, conn):
    for n in range(4):
        add_worker(conn, f"late:{n}:a", silent=10, dead_after=3)
    wids = {add_run(conn, f"late:{n % 4}:a") for n in range(200)}
    results: list[list[Recovered] | None] = []
    start = threading.Barrier(6)

    def sweeper() -> None:
        with psycopg.connect(dsn, autocommit=True) as mine:
            start.wait()
            for _ in range(5):
                results.append(recovery.sweep(mine))

    threads = [threading.Thread(target=sweeper) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    requeued = [r.id for batch in results if batch for r in batch]
    assert len(requeued) == len(set(requeued)) == 200 and set(requeued) == wids
    assert rows(dsn, "SELECT status, attempt, lease_epoch, count(*) FROM workflows GROUP BY 1, 2, 3") == [
        ("pending", 2, 2, 200)
    ]
