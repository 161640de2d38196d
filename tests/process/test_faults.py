"""Fault injection beyond tests/process/test_worker.py: a zombie holding
several runs, four recovers lined up on one lock so that they really run at the same moment,
and a claimed-ahead workflow whose lease is taken while it waits for a thread."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys

import psycopg
import pytest
from helpers import APPS, freeze, wait_for

import wfctl


def rows(dsn: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def counts(effects: list[tuple[str, str]], wid: str) -> dict[str, int]:
    return dict(collections.Counter(step for w, step in effects if w == wid))


def snapshot(dsn: str) -> list[tuple]:
    """Every column of every workflow and step row (the zombie must change none of them)."""
    return rows(
        dsn,
        "SELECT 'w', w::text FROM workflows w UNION ALL SELECT 's', s::text FROM workflow_steps s"
        " ORDER BY 1, 2",
    )


def recover_until(workers, wids: list[str], stale: str = "1s", *, force: bool = False) -> list[dict]:
    """Run `wfctl recover --json` as cron would until every one of ``wids`` was requeued (with
    ``force``, also from a worker still alive by its own heartbeat)."""
    seen: dict[str, dict] = {}

    def attempt() -> bool:
        result = workers.wfctl("recover", "--stale", stale, "--json", *(["--force"] if force else []))
        assert result.exit_code == 0, result.output
        for row in json.loads(result.stdout):
            seen[row["id"]] = row
        return all(w in seen for w in wids)

    wait_for(attempt, timeout=30, what=f"recover to requeue {wids}")
    return [seen[w] for w in wids]


@pytest.mark.slow
def test_zombie_with_several_runs_commits_nothing_logs_each_and_carries_on(workers, dsn):
    workers.gate.touch()
    wids = [str(wfctl.submit(dsn, "three", {"gate": gate})) for gate in (1, 2, 3)]
    zombie = workers.start("--concurrency", "3")
    wait_for(
        lambda: all(
            counts(workers.effects(), w).get(s) for w, s in zip(wids, ("one", "two", "three"), strict=True)
        ),
        what="each run to reach its gated step",
    )
    epochs_before = dict(rows(dsn, "SELECT id::text, lease_epoch FROM workflows"))
    zombie.send_signal(signal.SIGSTOP)
    try:
        requeued = recover_until(workers, wids)
        assert [r["lease_epoch"] for r in requeued] == [epochs_before[w] + 1 for w in wids]
        workers.gate.unlink()
        workers.run("--concurrency", "3")  # a rescuer completes all three
        assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 3)]
        before = snapshot(dsn)
    finally:
        zombie.send_signal(signal.SIGCONT)

    def lost_lines() -> list[str]:
        return [line for line in zombie.log_path.read_text().splitlines() if "lease lost" in line]

    wait_for(
        lambda: all(any(w in line for line in lost_lines()) for w in wids), what="one lease-lost line per run"
    )
    # the zombie is not wedged: it takes new work and finishes it
    fresh = str(wfctl.submit(dsn, "three", {}))
    wait_for(lambda: rows(dsn, "SELECT status FROM workflows WHERE id = %s", fresh) == [("completed",)])
    zombie_id = rows(dsn, "SELECT lease_owner FROM workflows WHERE id = %s", fresh)[0][0]
    assert zombie_id is not None and f":{zombie.pid}:" in zombie_id
    zombie.send_signal(signal.SIGTERM)
    assert zombie.wait(timeout=30) == 0
    after = [r for r in snapshot(dsn) if fresh not in r[1]]
    assert after == before, "the resumed zombie changed a row of a run it had lost"
    effects = workers.effects()
    # the gated step of each run executed twice (zombie + rescuer), its later steps once
    assert counts(effects, wids[0]) == {"one": 2, "two": 1, "three": 1}
    assert counts(effects, wids[1]) == {"one": 1, "two": 2, "three": 1}
    assert counts(effects, wids[2]) == {"one": 1, "two": 1, "three": 2}
    assert "Traceback" not in zombie.log_path.read_text()


def make_running(conn: psycopg.Connection, owner: str, heartbeat_age: str, specs: list[tuple[int, int, int]]):
    """Running workflows of ``owner`` (whose last heartbeat was ``heartbeat_age`` ago), one per
    (epoch, attempt, current_step) in ``specs``; returns their ids."""
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, heartbeat_at)"
        " VALUES (%s, 'host', 1, 8, now() - %s::interval)",
        (owner, heartbeat_age),
    )
    ids = []
    for epoch, attempt, step in specs:
        ids.append(
            str(
                conn.execute(
                    "INSERT INTO workflows (workflow_type, status, lease_owner, lease_epoch, attempt,"
                    " max_retries, current_step, updated_at)"
                    " VALUES ('three', 'running', %s, %s, %s, 10, %s, now() - %s::interval) RETURNING id",
                    (owner, epoch, attempt, step, heartbeat_age),
                ).fetchone()[0]
            )
        )
    return ids


@pytest.mark.slow
def test_four_recovers_released_at_the_same_moment_requeue_each_once(workers, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        stale = make_running(
            conn, "dead:1:aaaaaa", "1 hour", [(1 + i % 7, 1 + i % 3, i % 4) for i in range(60)]
        )
        stale += make_running(conn, "dead:2:bbbbbb", "10 minutes", [(3, 1, 0)] * 20)
        alive = make_running(conn, "alive:3:cccccc", "0 seconds", [(2, 1, 1)] * 10)
        pending = str(wfctl.submit(conn, "three", {}))
    before = {
        str(r[0]): r[1:]
        for r in rows(dsn, "SELECT id, status, lease_epoch, attempt, current_step, updated_at FROM workflows")
    }
    # Line the four up: an EXCLUSIVE lock on workflows blocks their UPDATE (it reads nothing
    # else first), so all four wait for it and then run at once.
    lock = psycopg.connect(dsn)
    lock.execute("LOCK TABLE workflows IN EXCLUSIVE MODE")
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "wfctl", "recover", "--stale", "5m", "--json"],
                cwd=APPS,
                env=workers.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        wait_for(
            lambda: (
                rows(
                    dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE %s",
                    "%stale AS MATERIALIZED%",
                )[0][0]
                == 4
            ),
            what="all four recovers to wait on the lock",
        )
    finally:
        lock.rollback()
        lock.close()
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    reported = [row for out, _err in outputs for row in json.loads(out)]
    ids = [r["id"] for r in reported]
    assert len(ids) == len(set(ids)), "a workflow was requeued twice"
    assert sorted(ids) == sorted(stale)
    after = {
        str(r[0]): r[1:]
        for r in rows(dsn, "SELECT id, status, lease_epoch, attempt, current_step, updated_at FROM workflows")
    }
    for wid in stale:
        _status, epoch, attempt, step, _updated = before[wid]
        assert after[wid][:4] == ("pending", epoch + 1, attempt + 1, step), wid
    for r in reported:
        assert r["lease_epoch"] == before[r["id"]][1] + 1 and r["status"] == "pending"
    for wid in [*alive, pending]:
        assert after[wid] == before[wid], "a recover touched a workflow that was not stale"


@pytest.mark.slow
def test_claimed_ahead_run_whose_lease_was_taken_is_not_started(workers, dsn):
    """A worker claims ahead (a backlog waiting for a free thread). When `wfctl recover` takes
    its leases while it is frozen, the run in the backlog must not start there: its
    first step must run once, on the rescuer. (Found by tests/chaos.py at the database restart:
    more duplicate executions on one worker than it had threads.)"""
    workers.gate.touch()
    a = str(wfctl.submit(dsn, "three", {"gate": 1}))
    # one thread; no heartbeat after the first for 60 s, so the worker learns of lost leases
    # only through its writes
    proc = workers.start("--concurrency", "1", "--heartbeat", "60s")
    wait_for(lambda: counts(workers.effects(), a).get("one"), what="a to enter its gated step")
    b = str(wfctl.submit(dsn, "three", {}))
    # b's row locked while the worker holds it claimed ahead, and the worker frozen: it can
    # neither start b nor hand it back (it would after CLAIM_AHEAD_HOLD) before recover
    holder = psycopg.connect(dsn)

    def claimed_ahead() -> bool:
        found = holder.execute(
            "SELECT 1 FROM workflows WHERE id = %s AND status = 'running' AND lease_owner LIKE %s FOR UPDATE",
            (b, f"%:{proc.pid}:%"),
        ).fetchall()
        if not found:
            holder.rollback()
        return bool(found)

    wait_for(claimed_ahead, what="b to be claimed ahead by the busy worker")
    freeze(proc)
    holder.rollback()
    holder.close()
    assert counts(workers.effects(), b) == {}
    try:
        # the worker's heartbeat is over 1 s old: both are taken (--force: by its own 60 s
        # heartbeat it is still alive, which is the point here); b, never started, uncharged
        found = recover_until(workers, [a, b], force=True)
        assert [(r["status"], r["attempt"]) for r in found] == [("pending", 2), ("pending", 1)]
        workers.gate.unlink()  # a's checkpoint is fenced out; the thread is free for b
    finally:
        proc.send_signal(signal.SIGCONT)
    wait_for(
        lambda: sum(
            1 for line in proc.log_path.read_text().splitlines() if "lease lost" in line and b in line
        ),
        what="the worker to drop b",
    )
    workers.run()
    assert rows(dsn, "SELECT status, count(*) FROM workflows GROUP BY 1") == [("completed", 2)]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert counts(workers.effects(), a) == {"one": 2, "two": 1, "three": 1}
    assert counts(workers.effects(), b) == {"one": 1, "two": 1, "three": 1}, (
        "b's first step ran on the worker that had lost its lease before starting it"
    )


@pytest.mark.parametrize("json_output", [True, False])
def test_a_recover_that_loses_the_database_after_its_requeue_says_what_it_requeued(
    cli, dsn, monkeypatch, json_output
):
    """The requeue is its own statement, committed; the deadline pass after it can meet a lost
    connection (the database restarted in between: the chaos run met it). The recover still
    prints the runs it requeued, then the error, exit 4: an operator (and cron's log) learns
    what was done."""
    from wfctl import recovery

    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = make_running(conn, "gone:1:a", "10 minutes", [(1, 1, 0), (2, 1, 1)])
    real_expire = recovery.expire

    def cut_then_expire(conn: psycopg.Connection) -> list[recovery.Expired]:
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        return real_expire(conn)

    monkeypatch.setattr(recovery, "expire", cut_then_expire)
    result = cli("recover", "--stale", "1m", "--dsn", dsn, *(["--json"] if json_output else []))
    assert result.exit_code == 4, result
    assert len(result.stderr.splitlines()) == 1, result.stderr
    # the error: one line, JSON under --json
    if json_output:
        assert json.loads(result.stderr)["exit_code"] == 4
    else:
        assert result.stderr.startswith("wfctl: error: "), result.stderr
    if json_output:
        reported = [r["id"] for r in json.loads(result.stdout) if r["action"] == "recovered"]
    else:
        reported = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("requeued ")]
    assert sorted(reported) == sorted(ids)
    assert rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'pending'") == [(2,)]
