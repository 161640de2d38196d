"""The claim's cost must not grow with the backlog: whatever the statistics say when
the worker's generic plan is built, and however many pending rows are not due (delayed, backing
off, sleeping, parked on a message or on children), one claim reads about as many entries of the
runnable index as it takes rows. Counted exactly, not timed: the pages of workflows_runnable_idx
the claim's transaction visited (pg_stat_get_xact_blocks_fetched; entries an index condition
rejects are read but not counted as returned, so pages are the honest measure) and the entries
it returned (pg_stat_get_xact_tuples_returned)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from helpers import PARTITIONED_RUN

from wfctl.queries import q
from wfctl.worker import claims

BATCH = 32


def claim_sql_with_placeholders() -> str:
    """worker.claim with $1..$13 for its named parameters, to PREPARE it as the worker does."""
    names = [
        "types",
        "retries",
        "timeouts",
        "timeout_errors",
        "limit",
        "owner",
        "after_priority",
        "after_run_at",
        "after_id",
        "floor",
        "addressable",
        "room",
        "ahead_from",
    ]
    casts = [
        "text[]",
        "int[]",
        "float8[]",
        "text[]",
        "int",
        "text",
        "int",
        "timestamptz",
        "uuid",
        "timestamptz",
        "boolean",
        "int",
        "bigint",
    ]
    text = q("worker.claim")
    for number, (name, cast) in enumerate(zip(names, casts, strict=True), start=1):
        text = text.replace(f"%({name})s", f"${number}::{cast}")
    return text.replace("%%", "%")


@pytest.fixture
def prepared(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection with the claim prepared under a forced generic plan (as the worker runs it),
    built before any row exists: the statistics say the table is empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("PREPARE claim_plan AS " + claim_sql_with_placeholders())
        yield conn


def insert(conn: psycopg.Connection[Any], sql: str, n: int) -> None:
    """``n`` rows of ``plain`` by INSERT ... SELECT generate_series (``sql``: the extra columns
    and their values as SELECT expressions over ``g``)."""
    columns, values = sql.split("|") if sql else ("", "")
    conn.execute(
        f"INSERT INTO workflows (workflow_type, input_data{columns}) "
        f"SELECT 'plain', '{{}}'::jsonb{values} FROM generate_series(1, %s) AS g",
        (n,),
    )


def claim(
    conn: psycopg.Connection[Any], types: list[str] | None = None
) -> tuple[list[tuple[Any, ...]], Read]:
    """One claim of up to BATCH in a transaction rolled back afterwards: the rows claimed
    (id, priority, run_at) and what it read of the runnable index."""
    types = types or ["plain"]
    conn.execute("BEGIN")
    try:
        before = entries(conn)
        claimed = (
            psycopg.ClientCursor(conn)
            .execute(  # EXECUTE takes no bound parameters
                "EXECUTE claim_plan(%s::text[], %s::int[], %s::float8[], %s::text[], %s::int, 'w1',"
                " NULL, NULL, NULL, NULL, true, %s, 1)",
                (types, [3] * len(types), [None] * len(types), [None] * len(types), BATCH, BATCH),
            )
            .fetchall()
        )
        after = entries(conn)
        read = Read(after.pages - before.pages, after.entries - before.entries)
        ids = [row[0] for row in claimed if row[0] is not None]
        picked = conn.execute(
            "SELECT id, priority, run_at FROM workflows WHERE id = ANY(%s) ORDER BY priority DESC, run_at",
            (ids,),
        ).fetchall()
        return picked, read
    finally:
        conn.execute("ROLLBACK")


@dataclass(frozen=True)
class Read:
    pages: int
    entries: int

    def small(self, priorities: int = 1) -> bool:
        """About one batch: a few entries beyond the batch, and a few pages (a leaf holds
        hundreds of entries) for each priority the claim visits (a descent of the index to
        find it, one to scan its due rows)."""
        return self.pages <= 6 * priorities and self.entries <= BATCH + 3 * priorities


def entries(conn: psycopg.Connection[Any]) -> Read:
    (pages, returned) = conn.execute(
        "SELECT pg_stat_get_xact_blocks_fetched('workflows_runnable_idx'::regclass),"
        " pg_stat_get_xact_tuples_returned('workflows_runnable_idx'::regclass)"
    ).fetchone()  # type: ignore[misc]
    return Read(int(pages), int(returned))


def test_a_backlog_submitted_after_the_plan_was_built_is_read_in_order(prepared) -> None:
    """The issue's case: the plan built on an empty table, then 20,000 rows arrive, not analyzed.
    The pick it replaced was a bitmap scan of the runnable index and a sort of all 20,000."""
    insert(prepared, "", 20_000)
    picked, read = claim(prepared)
    assert len(picked) == BATCH
    assert read.small(), read


def test_rows_not_due_are_not_read(prepared) -> None:
    """20,000 parked runs (a message wait without deadline: run_at 9999-01-01), 20,000 delayed by
    an hour and 5 due: the claim takes the 5 and reads next to nothing else. The pick it replaced
    read every pending row of the priority whenever fewer than a batch were due."""
    insert(prepared, ", run_at, wait_kind|, '9999-01-01'::timestamptz, 'message'", 20_000)
    insert(prepared, ", run_at|, now() + interval '1 hour'", 20_000)
    insert(prepared, "", 5)
    prepared.execute("ANALYZE workflows")
    picked, read = claim(prepared)
    assert len(picked) == 5
    assert read.small(priorities=2), read  # 0, then the probe that finds no lower priority


def test_priorities_are_taken_highest_first_then_by_age(prepared) -> None:
    """Several priorities, some with only rows not due: the batch is the 32 due rows highest in
    (priority DESC, run_at), whichever priorities it spans, and the read stays near the batch."""
    insert(prepared, ", priority, run_at|, 9, now() + interval '1 hour'", 5_000)  # none due
    insert(prepared, ", priority, run_at|, 5, now() - g * interval '1 second'", 10)
    insert(prepared, ", priority, run_at|, 0, now() - g * interval '1 second'", 5_000)
    insert(prepared, ", priority, run_at|, -3, now() - g * interval '1 second'", 5_000)
    picked, read = claim(prepared)
    expected = prepared.execute(
        "SELECT id, priority, run_at FROM workflows WHERE status = 'pending' AND run_at <= now()"
        " ORDER BY priority DESC, run_at LIMIT %s",
        (BATCH,),
    ).fetchall()
    assert picked == expected
    assert [p for _, p, _ in picked].count(5) == 10
    assert read.small(priorities=3), read  # 9 (nothing due), 5 and 0


def test_rows_held_by_another_claim_are_skipped(prepared, dsn: str) -> None:
    """Two claims at once take disjoint batches (SKIP LOCKED inside the function)."""
    insert(prepared, "", 100)
    with psycopg.connect(dsn) as other:
        (first,) = other.execute(
            "SELECT array_agg(id) FROM wfctl_claim_ready('{plain}', %s) AS f(id)", (BATCH,)
        ).fetchone()  # type: ignore[misc]
        picked, _ = claim(prepared)
        other.rollback()
    assert len(first) == BATCH and len(picked) == BATCH
    assert not set(first) & {row[0] for row in picked}


def test_types_the_worker_does_not_run_are_not_taken(prepared) -> None:
    insert(prepared, "", 10)
    prepared.execute(
        "UPDATE workflows SET workflow_type = 'other' WHERE id IN (SELECT id FROM workflows LIMIT 4)"
    )
    picked, _ = claim(prepared)
    assert len(picked) == 6
    assert claim(prepared, ["nothing"])[0] == []


def test_a_limited_backlog_ahead_of_unlimited_runs_is_read_only_as_far_as_the_batch(prepared) -> None:
    """Limited and unlimited types mixed: 20,000 runs of bulk (a limit in force that does not
    bind) ahead of 20,000 of plain and one urgent plain run at priority 100. The batch is the
    urgent run and bulk's oldest, and the claim reads about two batches of entries: the limited
    pick's and the unlimited pick's, which stops at the batch-th limited pick instead of
    stepping over bulk's backlog to plain's runs."""
    prepared.execute("INSERT INTO workflow_limits (workflow_type, concurrency) VALUES ('bulk', 100000)")
    prepared.execute(
        "INSERT INTO workflows (workflow_type, input_data, run_at) SELECT 'bulk', '{}'::jsonb,"
        " now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, 20000) AS g"
    )
    insert(prepared, ", run_at|, now() - interval '30 minutes' + g * interval '1 ms'", 20_000)
    insert(prepared, ", priority|, 100", 1)
    picked, read = claim(prepared, ["bulk", "plain"])
    expected = prepared.execute(
        "SELECT id, priority, run_at FROM workflows WHERE status = 'pending'"
        " ORDER BY priority DESC, run_at, id LIMIT %s",
        (BATCH,),
    ).fetchall()
    assert sorted(picked) == sorted(expected)
    assert picked[0][1] == 100
    # the limited pick (one scan: the urgent entry, then bulk's) and the unlimited one (a probe
    # and a scan at each of priorities 100 and 0, the last up to the stop)
    assert read.pages <= 6 + 6 * 2 and read.entries <= 2 * BATCH + 6, read


def claim_through_worker(
    conn: psycopg.Connection[Any], frontier: claims.Frontier, limit: int = BATCH
) -> list[claims.Claimed]:
    """One claim as the worker makes it (claims.claim, committed), from ``frontier``."""
    return claims.claim(conn, "w1", {"plain": claims.Policy(3)}, limit, frontier).claimed


@pytest.mark.skipif(PARTITIONED_RUN, reason="counts the unpartitioned table's runnable index")
def test_a_claim_from_the_frontier_does_not_step_over_runs_claimed_before(dsn: str) -> None:
    """The soak's finding: a claimed run's entry stays in the runnable index until a vacuum, and
    while another session's snapshot is older than the claim it cannot even be marked dead, so
    a scan from the head steps over every run claimed since the last vacuum. From the worker's
    frontier (its last claim's key) the scan starts past them; the scan from the head, made at
    least once a poll interval, still reads them."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as old:
        insert(conn, "", 3_000)
        # a transaction whose snapshot predates the claims below and is held until its end
        # (REPEATABLE READ: under READ COMMITTED an idle transaction holds none)
        old.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        old.execute("SELECT 1")
        frontier = claims.Frontier(full_every=3600.0)
        taken = 0
        while taken < 2_000:
            taken += len(claim_through_worker(conn, frontier, 64))
        assert frontier.key is not None
        conn.execute("BEGIN")
        try:
            before = entries(conn)
            picked = claim_through_worker(conn, frontier)
            after = entries(conn)
        finally:
            conn.execute("ROLLBACK")
        read = Read(after.pages - before.pages, after.entries - before.entries)
        assert len(picked) == BATCH and read.small(), read
        conn.execute("BEGIN")
        try:
            before = entries(conn)
            picked = claim_through_worker(conn, claims.Frontier())  # no key: from the head
            after = entries(conn)
        finally:
            conn.execute("ROLLBACK")
        # the test's premise: from the head the same claim reads the 2,000 claimed runs' entries
        assert len(picked) == BATCH and after.entries - before.entries >= 2_000
        old.rollback()


def test_runs_behind_the_frontier_are_taken_by_the_scan_from_the_head(dsn: str) -> None:
    """A run that lands behind the frontier (here: an older run_at, as a run handed back by
    recovery or a submit that committed late has) is not seen from the frontier, and is taken
    by the next scan from the head, which the frontier asks for once full_every has passed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert(conn, ", run_at|, now() - interval '1 minute'", 10)
        frontier = claims.Frontier(full_every=3600.0)
        assert len(claim_through_worker(conn, frontier)) == 10
        insert(conn, ", run_at|, now() - interval '2 minutes'", 3)  # behind the key
        insert(conn, "", 2)  # ahead of it
        assert len(claim_through_worker(conn, frontier)) == 2
        assert claim_through_worker(conn, frontier) == []
        frontier.full_every = 0.0  # a poll interval has passed
        late = claim_through_worker(conn, frontier)
        assert len(late) == 3
        (left,) = conn.execute("SELECT count(*) FROM workflows WHERE status = 'pending'").fetchone()  # type: ignore[misc]
        assert left == 0


def test_the_frontier_is_the_last_run_taken_in_claim_order(dsn: str) -> None:
    """Across priorities the frontier is the last run in (priority DESC, run_at, id) order, and
    a higher priority that appears later is still taken first (it is scanned from the head)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert(conn, ", priority, run_at|, 5, now() - g * interval '1 second'", 3)
        insert(conn, ", priority, run_at|, 0, now() - g * interval '1 second'", 5)
        frontier = claims.Frontier(full_every=3600.0)
        claim_through_worker(conn, frontier, 6)
        (last,) = conn.execute(
            "SELECT (priority, run_at, id)::text FROM workflows WHERE status = 'running'"
            " ORDER BY priority, run_at DESC, id DESC LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        assert frontier.key is not None and frontier.key[0] == 0
        assert last.endswith(f",{frontier.key[2]})")
        insert(conn, ", priority|, 9", 1)
        picked = claim_through_worker(conn, frontier, 2)
        priorities = conn.execute(
            "SELECT priority FROM workflows WHERE id = ANY(%s) ORDER BY priority DESC",
            ([c.id for c in picked],),
        ).fetchall()
        assert [p for (p,) in priorities] == [9, 0]


def test_workflow_ids_are_time_ordered(conn) -> None:
    """Migration 0011: new runs' ids are UUIDs of version 7 whose first 48 bits are the
    milliseconds of their insert, so a bulk submit's ids rise with it (the history's indexes
    take new keys at their right edge)."""
    conn.execute(
        "INSERT INTO workflows (workflow_type, input_data)"
        " SELECT 'plain', to_jsonb(g) FROM generate_series(1, 2000) AS g"
    )
    rows = conn.execute("SELECT id, created_at FROM workflows ORDER BY (input_data)::int").fetchall()
    ids = [row[0] for row in rows]
    assert {i.version for i in ids} == {7}
    millis = [int.from_bytes(i.bytes[:6], "big") for i in ids]
    assert millis == sorted(millis)
    created = rows[0][1].timestamp() * 1000
    assert abs(millis[0] - created) < 60_000
