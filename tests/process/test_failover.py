"""Failover: workers on a multi-host DSN follow a promoted synchronous standby, and no
acknowledged checkpoint is lost.

A primary and a synchronous streaming standby (pg_basebackup -R) on loopback, both with fsync
and synchronous_commit on, so a commit is acknowledged only once it is flushed here and on the
standby. Workers connect with ``host=127.0.0.1,127.0.0.1 port=P1,P2
target_session_attrs=read-write``. Mid-run the primary crashes (``pg_ctl stop -m immediate``) or
is stopped for a switchover (``-m fast``), and the standby is promoted; the workers reconnect on
their own and finish.

What proves that no acknowledged checkpoint was lost: a step starts only after the previous
step's checkpoint was committed, so every "start" of step N+1 in the side-effect log
(``apps/failoverflows.py``) stands for an acknowledged checkpoint of step N, and that step's
random token says which output must be stored. All of them must be on the new primary, as must
every completion a worker logged.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
import servers
from helpers import Workers, complete_lines, rows, wait_for
from psycopg import conninfo

from wfctl import schema

WORKFLOWS = 300
STEP_MS = 60
WORKERS = 3
CONCURRENCY = 8
DBNAME = "wfctl_failover"
STEPS = ("s1", "s2", "s3", "s4")  # the steps of "relay" in apps/failoverflows.py


@dataclass
class Cluster:
    primary: servers.Postgres
    standby: servers.Postgres

    def dsn(self) -> str:
        """The workers' DSN: both servers, whichever accepts writes."""
        return conninfo.make_conninfo(
            host="127.0.0.1,127.0.0.1",
            port=f"{self.primary.port},{self.standby.port}",
            target_session_attrs="read-write",
            dbname=DBNAME,
            user=servers.SERVER_USER,
        )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    servers.require_postgres()
    base = servers.make_base("wfctl-failover-")
    with contextlib.ExitStack() as stack:
        stack.callback(servers.remove, base)
        primary = stack.enter_context(
            servers.Postgres.init(
                base,
                "primary",
                primary=True,
                settings={**servers.DURABLE, "synchronous_standby_names": "standby"},
            )
        )
        standby = stack.enter_context(
            servers.Postgres.standby_of(primary, "standby", settings=servers.DURABLE)
        )
        primary.wait_sync_standby("standby")
        with primary.connect() as conn:
            settings = conn.execute(
                "SELECT current_setting('fsync'), current_setting('synchronous_commit'),"
                " current_setting('synchronous_standby_names')"
            ).fetchone()
        assert settings == ("on", "on", "standby"), "the durability under test is not configured"
        primary.create_database(DBNAME)
        yield Cluster(primary, standby)


@dataclass
class Trace:
    """The side-effect log: per (workflow id, step), the start times and the (token, time) of
    every completed execution."""

    starts: dict[tuple[str, str], list[float]]
    dones: dict[tuple[str, str], list[tuple[str, float]]]

    @classmethod
    def read(cls, path: Path) -> Trace:
        starts: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        dones: dict[tuple[str, str], list[tuple[str, float]]] = collections.defaultdict(list)
        # read while workers append: a last line may be half-written; it is read next time
        for line in complete_lines(path):
            parts = line.split()
            if parts[2] == "start":
                starts[(parts[0], parts[1])].append(float(parts[3]))
            else:
                dones[(parts[0], parts[1])].append((parts[3], float(parts[4])))
        return cls(starts, dones)

    def done_count(self) -> int:
        return sum(len(v) for v in self.dones.values())


def log_time(line: str) -> float:
    return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()


def completed_on(dsn: str) -> int | None:
    try:
        return rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'completed'")[0][0]
    except psycopg.OperationalError:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("stop_mode", ["immediate", "fast"])
def test_workers_follow_a_promoted_standby_and_lose_no_acknowledged_checkpoint(cluster, tmp_path, stop_mode):
    """``immediate``: the primary crashes (no shutdown checkpoint; commits waiting for the
    standby die with it). ``fast``: a planned switchover (sessions are terminated, the WAL is
    shipped to the standby, then the primary stops)."""
    dsn = cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.migrate(conn)
    workers = Workers(dsn, tmp_path)
    try:
        inputs = tmp_path / "inputs.jsonl"
        inputs.write_text(f'{{"ms": {STEP_MS}}}\n' * WORKFLOWS)
        result = workers.wfctl("submit", "relay", "--input-file", str(inputs), "--force")
        assert result.exit_code == 0, result.output
        ids = set(result.stdout.split())
        assert len(ids) == WORKFLOWS
        procs = [
            workers.start("--app", "failoverflows", "--concurrency", str(CONCURRENCY)) for _ in range(WORKERS)
        ]
        total_steps = WORKFLOWS * len(STEPS)
        wait_for(
            lambda: Trace.read(workers.log).done_count() >= total_steps * 0.35,
            timeout=60,
            what="a third of the steps to be done",
        )
        # -- the failover: the primary stops, the standby is promoted -----------------------
        completed_before = completed_on(cluster.primary.dsn(DBNAME))
        stop_at = time.time()
        cluster.primary.stop(stop_mode)
        stopped_at = time.time()
        # promote only once every worker has noticed: their first reconnects meet a stopped
        # primary and a standby that is still read-only, which target_session_attrs rejects
        wait_for(
            lambda: all("lost the database connection" in p.log_path.read_text() for p in procs),
            timeout=30,
            what="every worker to notice the stop",
        )
        promote_at = time.time()
        cluster.standby.promote()
        promoted_at = time.time()
        new_primary = cluster.standby.dsn(DBNAME)
        wait_for(
            lambda: completed_on(new_primary) == WORKFLOWS,
            timeout=60,
            what="every workflow to complete on the new primary",
        )
        finished_at = time.time()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=30) == 0, proc.log_path.read_text()
    finally:
        workers.stop_all()
    logs = [proc.log_path.read_text() for proc in procs]

    assert rows(new_primary, "SELECT pg_is_in_recovery()") == [(False,)]
    assert not cluster.primary.running()
    stored = {
        (str(wid), name): output["token"]
        for wid, name, output in rows(
            new_primary, "SELECT workflow_id, step_name, output_data FROM workflow_steps"
        )
    }
    outputs = {
        str(wid): (output or {}).get("tokens")
        for wid, output in rows(new_primary, "SELECT id, output_data FROM workflows")
    }
    assert set(outputs) == ids

    # -- every acknowledged checkpoint is there, with the output of the run that was acknowledged -
    trace = Trace.read(workers.log)
    acknowledged = 0
    acknowledged_before_stop = 0
    lost: list[str] = []
    for wid in ids:
        for index, name in enumerate(STEPS[:-1]):
            successor = trace.starts.get((wid, STEPS[index + 1]), [])
            if not successor:
                continue
            # the execution whose checkpoint let the successor start: the last one done before it
            ran = [(token, t) for token, t in trace.dones[(wid, name)] if t <= min(successor)]
            assert ran, f"{wid} step {STEPS[index + 1]} started before {name} was done"
            token = ran[-1][0]
            acknowledged += 1
            if min(successor) < stop_at:
                acknowledged_before_stop += 1
            if stored.get((wid, name)) != token:
                lost.append(f"{wid} {name}: stored {stored.get((wid, name))}, acknowledged {token}")
    # and a completion a worker logged acknowledges the last step and the workflow's output
    completion = re.compile(r"completed ([0-9a-f-]{36})")
    logged_done = {
        m.group(1): log_time(line)
        for log in logs
        for line in log.splitlines()
        if (m := completion.search(line))
    }
    assert set(logged_done) == ids
    completed_before_stop = sum(1 for t in logged_done.values() if t < stop_at)
    for wid in logged_done:
        (token, _t) = trace.dones[(wid, STEPS[-1])][-1]
        if stored.get((wid, STEPS[-1])) != token or outputs[wid] != [
            trace.dones[(wid, name)][-1][0] for name in STEPS
        ]:
            lost.append(f"{wid}: completion logged, but output {outputs[wid]} / last step not stored")
    assert lost == [], f"{len(lost)} acknowledged checkpoint(s) lost or replaced:\n" + "\n".join(lost[:20])
    assert acknowledged == WORKFLOWS * (len(STEPS) - 1)

    # -- on the new primary: everything completed, one checkpoint per step ------------------------
    assert rows(new_primary, "SELECT status, count(*) FROM workflows GROUP BY 1") == [
        ("completed", WORKFLOWS)
    ]
    assert rows(
        new_primary,
        "SELECT count(*), count(DISTINCT (workflow_id, step_number)),"
        " count(*) FILTER (WHERE status = 'completed') FROM workflow_steps",
    ) == [(total_steps, total_steps, total_steps)]

    # nothing ran twice: every write in flight at the stop was re-sent, not re-executed
    executions = sum(len(v) for v in trace.starts.values())
    twice = {k: len(v) for k, v in trace.starts.items() if len(v) != 1}
    assert twice == {}, f"steps that ran more than once: {twice}"
    assert executions == total_steps

    # -- every worker lost its connection and got it back on its own -------------------------------
    reconnects = []
    for log in logs:
        assert "lost the database connection" in log, log
        found = [float(x) for x in re.findall(r"reconnected after ([0-9.]+)s", log)]
        assert found, log
        reconnects.extend(found)
    claimed_twice = rows(new_primary, "SELECT count(*) FROM workflows WHERE lease_epoch > 1")[0][0]
    resumed = min(t for v in trace.starts.values() for t in v if t > promoted_at)
    figures = {
        "workflows": WORKFLOWS,
        "steps (checkpoints stored)": total_steps,
        "step executions": executions,
        "workflows completed on the old primary before the stop": completed_before,
        "completions logged before the stop": completed_before_stop,
        "checkpoints acknowledged (successor started)": acknowledged,
        "of them before the stop": acknowledged_before_stop,
        "workflows claimed again (claim reply lost in the failover)": claimed_twice,
        f"stop (pg_ctl stop -m {stop_mode}) s": round(stopped_at - stop_at, 2),
        "promotion (pg_ctl promote -w) s": round(promoted_at - promote_at, 2),
        "first step started on the new primary, s after the stop": round(resumed - stop_at, 2),
        "worker reconnect times s": reconnects,
        "stop to all completed s": round(finished_at - stop_at, 2),
    }
    print(f"\nfailover figures ({stop_mode}):\n" + json.dumps(figures, indent=2))
