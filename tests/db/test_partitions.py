"""The time-partitioned layout: `wfctl init --partitioned`, `wfctl db
partition`, idempotency keys without a unique index, prune dropping whole intervals, partitions
made ahead of time (and rows moved out of the default partition), the reference queries pruned
to their window, `wfctl db status`.

The engine's own tests run in this layout too: the database tier with
``WFCTL_TEST_LAYOUT=partitioned pytest tests/db`` (every test database is then a copy of a
partitioned template: tests/conftest.py), and the tests marked ``layouts`` once in each layout."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import fakeclock
import psycopg
import pytest
from helpers import PARTITIONED_RUN, rows, wait_for, with_db
from psycopg import conninfo
from support.partitions import OLD, partition_names
from test_schema import reference_queries

import wfctl
from wfctl import control, partitions, reports, rollups
from wfctl.queries import q
from wfctl.worker import claims
from wfctl.worker.checkpoints import Request, flush
from wfctl.worker.targets import PartitionTargets


def old_partitions(dsn: str, *days_ago: int) -> None:
    """Partitions for intervals in the past (wfctl makes them from now on; older ones exist when
    a database with old rows was converted)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for days in days_ago:
            conn.execute(
                "SELECT wfctl_create_partition(wfctl_partition_start(now() - make_interval(days => %s),"
                " interval '1 day'))",
                (days,),
            )


def finished_workflow(
    conn: psycopg.Connection, created: str, status: str = "completed", steps: int = 2
) -> str:
    """A finished workflow created at ``created`` (SQL), finished a day later, with steps, an
    attempt, a message and an event."""
    wid = conn.execute(
        f"INSERT INTO workflows (workflow_type, status, created_at, finished_at, updated_at)"
        f" VALUES ('three', %s, {created}, {created} + interval '1 day', {created} + interval '1 day')"
        " RETURNING id",
        (status,),
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO workflow_steps (workflow_id, step_number, status, workflow_created_at)"
        " SELECT w.id, n, 'completed', w.created_at FROM workflows w, generate_series(1, %s) n"
        " WHERE w.id = %s",
        (steps, wid),
    )
    conn.execute(
        "INSERT INTO workflow_attempts (workflow_id, lease_epoch, attempt, workflow_created_at)"
        " SELECT id, 1, 1, created_at FROM workflows WHERE id = %s",
        (wid,),
    )
    conn.execute("INSERT INTO workflow_messages (workflow_id, topic) VALUES (%s, 't')", (wid,))
    conn.execute("INSERT INTO workflow_events (workflow_id, key) VALUES (%s, 'k')", (wid,))
    return str(wid)


@pytest.mark.parametrize(
    "moment",
    [datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 10, 24, 12, tzinfo=UTC)],
    ids=["before-spring-forward", "before-fall-back"],
)
def test_partition_bounds_are_whole_utc_days_in_a_session_of_any_time_zone(pdsn, moment):
    """In a session whose TimeZone has summer time, a day around its change is 23 or 25 hours
    of that zone's calendar: a partition made there must still end where the next one starts,
    at midnight UTC, and the next must be made."""
    fakeclock.stop(pdsn, moment)
    berlin = with_db(
        pdsn, str(conninfo.conninfo_to_dict(pdsn)["dbname"]), options="-c TimeZone=Europe/Berlin"
    )
    with psycopg.connect(berlin, autocommit=True) as conn:  # what the worker's duty calls
        created = conn.execute("SELECT created FROM wfctl_ensure_partitions(4)").fetchone()
    assert created == (5,)  # the day of the clock and four ahead
    bounds = sorted(
        (start, end)
        for start, end in rows(
            pdsn,
            "SELECT range_start, range_end FROM wfctl_partitions()"
            " WHERE parent = 'workflow_steps' AND NOT is_default",
        )
    )
    day = moment.replace(hour=0)
    assert [b for b in bounds if day <= b[0] < day + timedelta(days=5)] == [
        (day + timedelta(days=k), day + timedelta(days=k + 1)) for k in range(5)
    ]


def test_init_partitioned_makes_partitions_ahead_and_status_lists_them(cli, pdsn):
    status = json.loads(cli("db", "status", "--dsn", pdsn, "--json").stdout)
    assert (status["layout"], status["partition_interval"]) == ("partitioned", "1d")
    parts = [p for p in status["partitions"] if p["table"] == "workflows"]
    assert len(parts) == partitions.AHEAD + 2  # today, 7 days ahead, and the default
    assert parts[-1]["default"] and parts[-1]["partition"] == "workflows_default"
    today = rows(pdsn, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")[0][0]
    assert parts[0]["partition"] == f"workflows_p{today}"
    assert {p["table"] for p in status["partitions"]} == {"workflows", "workflow_steps", "workflow_attempts"}
    text = cli("db", "status", "--dsn", pdsn)
    assert "Partitions" in text.stdout and f"workflow_steps_p{today}" in text.stdout, text.stdout
    # init again: nothing to do; another interval: refused (it is chosen once)
    again = cli("init", "--partitioned", "--dsn", pdsn)
    assert again.exit_code == 0 and "nothing changed" in again.stderr, again.output
    other = cli("init", "--partitioned", "--partition-interval", "7d", "--dsn", pdsn)
    assert other.exit_code == 7
    assert "partitioned every 1d already, not 7d" in other.stderr


def partition_of(conn: psycopg.Connection, table: str, days_ago: int) -> str:
    """``table``'s partition that holds runs created ``days_ago``."""
    (name,) = conn.execute(  # type: ignore[misc]
        "SELECT partition FROM wfctl_partitions() WHERE parent = %s"
        " AND now() - make_interval(days => %s) >= range_start"
        " AND now() - make_interval(days => %s) < range_end",
        (table, days_ago, days_ago),
    ).fetchone()
    return name


def runnable_index(conn: psycopg.Connection, partition: str) -> str:
    (name,) = conn.execute(  # type: ignore[misc]
        "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass"
        " AND pg_get_indexdef(indexrelid) LIKE '%%(priority DESC, run_at, id)%%'",
        (partition,),
    ).fetchone()
    return name


def scans(conn: psycopg.Connection, *relations: str) -> list[int]:
    """Scans of each relation in the current transaction so far: of an index, its index scans;
    of a table, its sequential scans and the index scans of all its indexes."""
    query = (
        "SELECT pg_stat_get_xact_numscans(%(r)s::regclass)"
        " + coalesce((SELECT sum(pg_stat_get_xact_numscans(indexrelid)) FROM pg_index"
        "             WHERE indrelid = %(r)s::regclass), 0)"
    )
    return [int(conn.execute(query, {"r": r}).fetchone()[0]) for r in relations]  # type: ignore[index]


def test_the_hot_path_leaves_the_partitions_of_older_runs_unopened(pdsn):
    """Migration 0012: between its scans from the head, a worker's claim reads only the runs
    created from its floor on (the oldest its last scan from the head took), and its UPDATE
    only those from the oldest it picked (worker.claim_pruned), so it reads no index of an
    older partition; an old run made runnable again is taken by the next scan from the head,
    which lowers the floor. Measured on a partition 5 days old, with the worker's generic
    plan."""
    old_partitions(pdsn, 5)
    policy = {"plain": claims.Policy(3)}
    with psycopg.connect(pdsn, autocommit=True) as conn:
        conn.execute(q("worker.session_setup"))
        old_table = partition_of(conn, "workflows", 5)
        runnable = runnable_index(conn, old_table)
        conn.execute("INSERT INTO workflows (workflow_type) SELECT 'plain' FROM generate_series(1, 40)")
        frontier = claims.Frontier(full_every=3600.0, bounded=True)
        first = claims.claim(conn, "w1", policy, 32, frontier).claimed  # from the head
        (oldest,) = conn.execute(  # type: ignore[misc]
            "SELECT min(created_at) FROM workflows WHERE id = ANY(%s)", ([c.id for c in first],)
        ).fetchone()
        assert len(first) == 32 and frontier.floor == oldest
        (old_id, old_created) = conn.execute(
            "INSERT INTO workflows (workflow_type, created_at) VALUES ('plain', now() - interval '5 days')"
            " RETURNING id, created_at"
        ).fetchone()

        with conn.transaction():
            before = scans(conn, old_table)
            second = claims.claim(conn, "w1", policy, 32, frontier).claimed
            assert scans(conn, old_table) == before, "the claim read the old partition"
        assert len(second) == 8 and old_id not in {c.id for c in second}

        frontier.full_every = 0.0  # a second has passed: the next claim scans from the head
        with conn.transaction():
            before = scans(conn, runnable)
            third = claims.claim(conn, "w1", policy, 32, frontier).claimed
            assert scans(conn, runnable) > before
        assert [c.id for c in third] == [old_id] and frontier.floor == old_created


def claimed_in_partitions(conn: psycopg.Connection, new: int, old_days: int) -> list[claims.Claimed]:
    """``new`` runs created now and one created ``old_days`` ago, claimed by a worker in the
    partitioned layout (a scan from the head: all of them)."""
    conn.execute("INSERT INTO workflows (workflow_type) SELECT 'plain' FROM generate_series(1, %s)", (new,))
    conn.execute(
        "INSERT INTO workflows (workflow_type, created_at)"
        " VALUES ('plain', now() - make_interval(days => %s))",
        (old_days,),
    )
    frontier = claims.Frontier(full_every=3600.0, bounded=True)
    claimed = claims.claim(conn, "w1", {"plain": claims.Policy(3)}, 32, frontier).claimed
    assert len(claimed) == new + 1
    return claimed


def step_and_completion(c: claims.Claimed) -> list[Request]:
    """Step 1's checkpoint and the completion that follows it (one row of the flush)."""
    return [
        Request(
            c.id,
            c.epoch,
            "step",
            c.attempt,
            step=1,
            name="one",
            output="1",
            started=datetime.now(UTC),
            partition=c.partition,
        ),
        Request(c.id, c.epoch, "complete", c.attempt, result='"done"', expect=1, partition=c.partition),
    ]


def test_the_group_commit_writes_in_the_partitions_that_hold_the_runs(pdsn):
    """The claim returns the partition of each run and the flush updates the workflows and
    workflow_attempts partitions that hold the batch's runs (one statement per partition), so
    a batch of today's runs reads no index of an older partition: through the parents, each
    row probes every partition. A batch with runs in two partitions writes them all."""
    old_partitions(pdsn, 5)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        conn.execute(q("worker.session_setup"))
        claimed = claimed_in_partitions(conn, new=3, old_days=5)
        old_tables = [partition_of(conn, "workflows", 5), partition_of(conn, "workflow_attempts", 5)]
        oid_of = dict(conn.execute("SELECT w.id, w.tableoid::oid FROM workflows w").fetchall())
        assert {c.id: c.partition for c in claimed} == oid_of
        (old_oid,) = conn.execute("SELECT %s::regclass::oid", (old_tables[0],)).fetchone()  # type: ignore[misc]
        old_run = next(c for c in claimed if c.partition == old_oid)
        new_runs = [c for c in claimed if c is not old_run]
        targets = PartitionTargets()

        batch = [r for c in new_runs for r in step_and_completion(c)]
        with conn.transaction():
            before = scans(conn, *old_tables)
            flush(conn, batch, targets)
            assert scans(conn, *old_tables) == before, "the flush read an old partition"
        # the 5-day-old run, one of today's and one in the default partition (no partition
        # for a day ago): three statements
        second = claimed_in_partitions(conn, new=1, old_days=1)
        both = step_and_completion(old_run) + [r for c in second for r in step_and_completion(c)]
        flush(conn, both, targets)

        assert all(r.ok for r in batch + both)
        done = rows(
            pdsn,
            "SELECT w.status, w.current_step, a.outcome, s.status FROM workflows w"
            " JOIN workflow_attempts a ON a.workflow_id = w.id"
            " JOIN workflow_steps s ON s.workflow_id = w.id",
        )
        assert done == [("completed", 1, "completed", "completed")] * 6


def test_the_group_commit_finds_a_renamed_partition_through_the_parent(pdsn):
    """A partition renamed by hand after the worker looked up its name: the flush writes
    through the parent tables, and looks the name up afresh next time."""
    with psycopg.connect(pdsn, autocommit=True) as conn:
        conn.execute(q("worker.session_setup"))
        (run,) = claimed_in_partitions(conn, new=0, old_days=0)
        targets = PartitionTargets()
        assert targets.of(conn, run.partition).workflows[1] == partition_of(conn, "workflows", 0)
        renamed = partition_of(conn, "workflows", 0) + "_by_hand"
        conn.execute(f"ALTER TABLE {partition_of(conn, 'workflows', 0)} RENAME TO {renamed}")
        batch = step_and_completion(run)
        flush(conn, batch, targets)
        assert [r.ok for r in batch] == [True, True]
        assert targets.of(conn, run.partition).workflows[1] == renamed
        assert rows(pdsn, "SELECT status, current_step FROM workflows") == [("completed", 1)]


def test_a_run_in_the_default_partition_is_written_after_its_partition_is_made(pdsn):
    """A run created in an interval without a partition lands in the default partition, and
    moves out when the partition is made (by the worker's duty, while the run is held): the
    group commit writes such a run through the parents, which find it in its new partition."""
    with psycopg.connect(pdsn, autocommit=True) as conn:
        conn.execute(q("worker.session_setup"))
        (run,) = claimed_in_partitions(conn, new=0, old_days=3)  # no partition 3 days back
        targets = PartitionTargets()
        assert run.partition == conn.execute("SELECT 'workflows_default'::regclass::oid").fetchone()[0]  # type: ignore[index]
        targets.of(conn, run.partition)  # looked up before the move, as a worker would
        old_partitions(pdsn, 3)
        assert partition_of(conn, "workflows", 3) != "workflows_default"
        batch = step_and_completion(run)
        flush(conn, batch, targets)
        assert [r.ok for r in batch] == [True, True]
        assert rows(pdsn, "SELECT tableoid::regclass::text, status, current_step FROM workflows") == [
            (partition_of(conn, "workflows", 3), "completed", 1)
        ]


@pytest.mark.skipif(PARTITIONED_RUN, reason="the run's databases are partitioned already")
def test_the_partition_duty_tells_the_worker_its_layout(dsn, pdsn):
    """The worker bounds its claims (Frontier.bounded) by what its partition duty reports: the
    floor and the created_at bound are the partitioned layout's only."""
    with psycopg.connect(dsn, autocommit=True) as plain, psycopg.connect(pdsn, autocommit=True) as parted:
        assert (partitions.ensure(plain).partitioned, partitions.ensure(parted).partitioned) == (False, True)


def test_one_key_gives_one_row_under_concurrent_submits(pdsn):
    """The advisory lock in the guard trigger: the second submit waits for the first one's
    commit, then finds the key and stores nothing (and wfctl.submit returns the first id)."""
    first = psycopg.connect(pdsn)
    try:
        wid = first.execute("SELECT wfctl_submit('three', NULL, 'the-key')").fetchone()[0]
        got: list[object] = []
        second = threading.Thread(target=lambda: got.append(wfctl.submit(pdsn, "three", {}, key="the-key")))
        second.start()
        # the second insert waits for the key's lock, held by the first transaction
        wait_for(
            lambda: (
                rows(
                    pdsn,
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event = 'advisory' AND datname = current_database()",
                )[0][0]
                == 1
            ),
            timeout=10,
            what="the second submit to wait on the key's lock",
        )
        first.commit()
        second.join(timeout=10)
    finally:
        first.close()
    assert got == [wid]
    assert rows(pdsn, "SELECT count(*) FROM workflows WHERE idempotency_key = 'the-key'") == [(1,)]
    # a plain INSERT of a used key is skipped too, and the same key in one statement once
    with psycopg.connect(pdsn, autocommit=True) as conn:
        cur = conn.execute(
            "INSERT INTO workflows (workflow_type, idempotency_key) VALUES ('three', 'the-key')"
        )
        assert cur.rowcount == 0
        cur = conn.execute(
            "INSERT INTO workflows (workflow_type, idempotency_key) VALUES ('three', 'k2'), ('three', 'k2')"
        )
        assert cur.rowcount == 1


def test_prune_drops_old_intervals_whole_and_deletes_the_rest(cli, pdsn):
    old_partitions(pdsn, 40, 39, 38)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        gone = [finished_workflow(conn, OLD) for _ in range(3)]
        gone.append(finished_workflow(conn, OLD, status="failed"))
        # the next day holds a run still pending: that interval is kept, its finished run deleted
        kept_pending = conn.execute(
            "INSERT INTO workflows (workflow_type, created_at) VALUES ('three', now() - interval '39 days')"
            " RETURNING id"
        ).fetchone()[0]
        finished_workflow(conn, "now() - interval '39 days'")
        # the third: finished recently (retried long after it was created): kept whole
        recent = conn.execute(
            "INSERT INTO workflows (workflow_type, status, created_at, finished_at)"
            " VALUES ('three', 'completed', now() - interval '38 days', now() - interval '1 day')"
            " RETURNING id"
        ).fetchone()[0]
        conn.execute("ANALYZE workflows")
    day40 = rows(pdsn, f"SELECT 'workflows_p' || to_char(({OLD}) AT TIME ZONE 'UTC', 'YYYYMMDD')")[0][0]

    dry = cli("prune", "--older-than", "30d", "--dry-run", "--json", "--dsn", pdsn)
    assert json.loads(dry.stdout) == {
        "dry_run": True, "workflows": 5, "steps": 10, "workers": 0, "partitions": 1, "partitions_busy": 0,
    }  # fmt: skip
    assert day40 in partition_names(pdsn)

    done = cli("prune", "--older-than", "30d", "--dsn", pdsn)
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        "removed 5 workflow(s) and 10 step(s) (1 partition interval(s) dropped whole)\n"
    ), done.output
    names = partition_names(pdsn)
    assert day40 not in names and day40.replace("workflows", "workflow_steps") not in names
    assert day40.replace("workflows", "workflow_attempts") not in names
    left = {wid for (wid,) in rows(pdsn, "SELECT id FROM workflows")}
    assert left == {kept_pending, recent}
    for table in ("workflow_steps", "workflow_attempts", "workflow_messages", "workflow_events"):
        orphans = rows(
            pdsn,
            f"SELECT count(*) FROM {table} x"
            " WHERE NOT EXISTS (SELECT 1 FROM workflows w WHERE w.id = x.workflow_id)",
        )
        assert orphans == [(0,)], table


def test_a_drop_that_cannot_get_its_locks_gives_up_and_rows_go_one_by_one(pdsn):
    old_partitions(pdsn, 40)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        finished_workflow(conn, OLD)
    holder = psycopg.connect(pdsn)
    try:
        holder.execute("SELECT count(*) FROM workflows")  # a long report: ACCESS SHARE held
        with psycopg.connect(pdsn, autocommit=True) as conn:
            result = control.prune(conn, timedelta(days=30), ["completed"])
    finally:
        holder.close()
    assert (result.partitions, result.partitions_busy) == (0, 1)
    assert (result.workflows, result.steps) == (1, 2)  # by the row deletes instead
    assert rows(pdsn, "SELECT count(*) FROM workflows") == [(0,)]


def test_a_drop_keeps_an_interval_holding_a_child_whose_parent_stays(pdsn):
    old_partitions(pdsn, 40)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        child = finished_workflow(conn, OLD)
        parent = conn.execute(
            "INSERT INTO workflows (workflow_type, status) VALUES ('three', 'running') RETURNING id"
        ).fetchone()[0]
        conn.execute("UPDATE workflows SET parent_id = %s WHERE id = %s", (parent, child))
        result = control.prune(conn, timedelta(days=30), ["completed"])
    assert (result.partitions, result.workflows) == (0, 0)
    assert rows(pdsn, "SELECT count(*) FROM workflows WHERE id = %s", child) == [(1,)]
    assert rows(pdsn, "SELECT count(*) FROM workflow_messages WHERE workflow_id = %s", child) == [(1,)]
    with psycopg.connect(pdsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE workflows SET status = 'completed', finished_at = now() WHERE id = %s", (parent,)
        )
        result = control.prune(conn, timedelta(days=30), ["completed"])
        assert (result.partitions, result.workflows) == (0, 0)  # the parent stays: so does its child
        conn.execute("UPDATE workflows SET finished_at = now() - interval '31 days' WHERE id = %s", (parent,))
        result = control.prune(conn, timedelta(days=30), ["completed"])
    # the parent is old history too: the child's interval is dropped, the parent deleted by row
    assert (result.partitions, result.workflows) == (1, 2)


def test_an_interval_kept_at_the_last_check_keeps_its_messages_and_events(pdsn, monkeypatch):
    # the drop waits for its locks as long as the retry below takes
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT", "60s")
    old_partitions(pdsn, 40)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        wid = finished_workflow(conn, OLD)
    retry = psycopg.connect(pdsn)
    outcome: list[control.Pruned] = []
    try:
        # a retry of the run, not yet committed when the drop checks the interval first
        retry.execute(
            "UPDATE workflows SET status = 'pending', finished_at = NULL, updated_at = now() WHERE id = %s",
            (wid,),
        )

        def drop() -> None:
            with psycopg.connect(pdsn, autocommit=True) as conn:
                outcome.append(control.prune(conn, timedelta(days=30), ["completed"]))

        dropper = threading.Thread(target=drop)
        dropper.start()
        wait_for(
            lambda: (
                rows(
                    pdsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%wfctl_prune_partition%'",
                )
                == [(1,)]
            )
        )
        retry.commit()
        dropper.join(timeout=30)
        assert not dropper.is_alive()
    finally:
        retry.close()
    assert (outcome[0].partitions, outcome[0].partitions_busy, outcome[0].workflows) == (0, 0, 0)
    for table in ("workflow_steps", "workflow_messages", "workflow_events"):
        assert rows(pdsn, f"SELECT count(*) FROM {table} WHERE workflow_id = %s", wid) != [(0,)], table


def test_the_success_rate_query_reads_only_the_partitions_of_its_window(pdsn):
    old_partitions(pdsn, 40, 20, 10, 5, 3)
    success_rate = next(s for s in reference_queries() if "24 hours" in s)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        finished_workflow(conn, OLD)
        finished_workflow(conn, "now()")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + success_rate))
        assert conn.execute(success_rate).fetchall()[0][1] == 1  # one run in the last 24 hours
    today, yesterday = rows(
        pdsn,
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'),"
        " to_char((now() - interval '1 day') AT TIME ZONE 'UTC', 'YYYYMMDD')",
    )[0]
    assert f"workflows_p{today}" in plan, plan
    # the window has no end, so the (empty) partitions made ahead are read; the old ones are not
    scanned = {w[len("workflows_p") :] for w in plan.split() if w.startswith("workflows_p")}
    assert scanned and min(scanned) >= yesterday, plan
    assert "Subplans Removed: 5" in plan, plan
    for other in reference_queries():
        with psycopg.connect(pdsn, autocommit=True) as conn:
            conn.execute(other).fetchall()  # the other two run unchanged


def test_stats_runs_in_this_layout(cli, pdsn):
    """`wfctl stats` groups runs by their primary key, which is (id, created_at) here: grouped
    by id alone the success-rate query was refused ("must appear in the GROUP BY clause")."""
    with psycopg.connect(pdsn, autocommit=True) as conn:
        finished_workflow(conn, "now()")
        finished_workflow(conn, "now()", status="failed")
    result = cli("stats", "--since", "24h", "--json", "--dsn", pdsn)
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)["success_rate"]
    assert (row["workflow_type"], row["total"], row["completed"], row["failed"]) == ("three", 2, 1, 1)


def test_the_rollups_of_a_dropped_interval_are_not_read_and_are_made_again(cli, pdsn):
    """Dropping a partition fires no trigger: the rollups of its hours name it (part_oid), and a
    report does not use them once it is gone; the next refresh rolls those hours up again."""
    old_partitions(pdsn, 40)
    window = timedelta(days=45)
    with psycopg.connect(pdsn, autocommit=True) as conn:
        for _ in range(3):
            finished_workflow(conn, OLD)

        def caught_up() -> bool:
            rollups.catch_up(conn, hours=2000)
            return not rollups.due(conn)

        wait_for(caught_up, what="the rollups to catch up")
        day = "SELECT count(*) FROM wfctl_rollup_window(now() - %s) WHERE span = 'd'"
        assert conn.execute(day, (window,)).fetchone()[0] > 0
        (three,) = reports.stats(conn, since=window).success_rate
        assert three["total"] == 3
    assert cli("prune", "--older-than", "30d", "--dsn", pdsn).exit_code == 0
    with psycopg.connect(pdsn, autocommit=True) as conn:
        assert reports.stats(conn, since=window).success_rate == []
        rollups.catch_up(conn, hours=2000)
        assert reports.stats(conn, since=window).success_rate == []
        (gone,) = conn.execute(
            "SELECT count(*) FROM wfctl_rollup_buckets b"
            " WHERE NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = b.part_oid)"
        ).fetchone()
        assert gone == 0
