"""The order a claim takes runs in: by priority, then run_at, then id, across limited and
unlimited types alike. Limits (a type's concurrency, its rate, the per-key limits and their
rotation) only hold runs back; they never put a limited type's runs ahead of others'.

Each case prepares the table by SQL (explicit priorities and run_at, so the expected order is
known) and makes one claim as the worker does (claims.claim), then compares the ids taken with
the ones the rule says. The case on a real worker: tests/process/test_claim_order_workers.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
import pytest
from helpers import rows

from wfctl.worker import claims


def policies(*types: str) -> dict[str, claims.Policy]:
    return {t: claims.Policy(max_retries=0) for t in types}


def add_runs(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    count: int,
    *,
    priority: int = 0,
    age: int = 0,
    key: str | None = None,
) -> None:
    """``count`` runnable runs: run_at ``age`` minutes ago, less a second per run (the first
    of them is the oldest)."""
    conn.execute(
        "INSERT INTO workflows (workflow_type, priority, run_at, concurrency_key)"
        " SELECT %s, %s, now() - make_interval(mins => %s) - make_interval(secs => %s - g), %s"
        " FROM generate_series(1, %s) AS g",
        (workflow_type, priority, age, count, key, count),
    )


def limit(conn: psycopg.Connection[Any], workflow_type: str, **values: int) -> None:
    columns = ", ".join(values)
    conn.execute(
        f"INSERT INTO workflow_limits (workflow_type, {columns})"
        f" VALUES (%s, {', '.join(['%s'] * len(values))})",
        (workflow_type, *values.values()),
    )


def in_claim_order(conn: psycopg.Connection[Any], where: str, n: int) -> list[UUID]:
    """The first ``n`` pending runs that satisfy ``where``, by the claim's rule."""
    return [
        r[0]
        for r in conn.execute(
            f"SELECT id FROM workflows WHERE status = 'pending' AND run_at <= now() AND ({where})"
            " ORDER BY priority DESC, run_at, id LIMIT %s",
            (n,),
        ).fetchall()
    ]


def claim(conn: psycopg.Connection[Any], types: list[str], n: int, **kw: Any) -> list[UUID]:
    return [c.id for c in claims.claim(conn, "w1", policies(*types), n, **kw).claimed]


def test_a_high_priority_run_is_claimed_before_a_limited_backlog(dsn: str) -> None:
    """300 runs of a type under a limit it never reaches, then one urgent run of an unlimited
    type at priority 100: the next claim takes the urgent run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "bulk", concurrency=1000)
        add_runs(conn, "bulk", 300, age=10)
        add_runs(conn, "urgent", 1, priority=100)
        (urgent,) = in_claim_order(conn, "workflow_type = 'urgent'", 1)
        taken = claim(conn, ["bulk", "urgent"], 32)
    assert len(taken) == 32
    assert urgent in taken


def test_a_batch_across_limited_and_unlimited_types_is_in_claim_order(dsn: str) -> None:
    """Two limited types (their limits not reached) and an unlimited one, at several priorities
    and ages: the batch is exactly the first runs of all three by priority, run_at, id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "aaa", concurrency=1000)
        limit(conn, "zzz", rate_count=1000, rate_seconds=1)
        for wtype, age in (("aaa", 1), ("zzz", 3), ("plain", 2)):
            add_runs(conn, wtype, 20, priority=0, age=age)
            add_runs(conn, wtype, 4, priority=5, age=age + 10)
        add_runs(conn, "plain", 3, priority=9)
        expected = in_claim_order(conn, "true", 24)
        taken = claim(conn, ["aaa", "plain", "zzz"], 24)
    assert sorted(taken) == sorted(expected)


def test_limited_types_share_a_batch_by_age_not_by_name(dsn: str) -> None:
    """Among limited types the batch is not filled in the types' name order: the older runs of
    the type whose name sorts last are taken first."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "aaa", concurrency=1000)
        limit(conn, "zzz", concurrency=1000)
        add_runs(conn, "aaa", 20, age=1)
        add_runs(conn, "zzz", 20, age=5)
        expected = in_claim_order(conn, "workflow_type = 'zzz'", 10)
        taken = claim(conn, ["aaa", "zzz"], 10)
    assert sorted(taken) == sorted(expected)


def test_a_limit_holds_runs_back_and_the_rest_of_the_batch_goes_in_order(dsn: str) -> None:
    """capped (2 at a time, one already running) holds the oldest runs: the claim takes the one
    it still allows and, for the rest of the batch, the next runs in order of the other types."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "capped", concurrency=2)
        add_runs(conn, "capped", 1, age=30)
        conn.execute("UPDATE workflows SET status = 'running' WHERE workflow_type = 'capped'")
        add_runs(conn, "capped", 10, age=20)
        add_runs(conn, "plain", 10, age=10)
        add_runs(conn, "other", 10, age=15)
        expected = in_claim_order(conn, "workflow_type = 'capped'", 1) + in_claim_order(
            conn, "workflow_type <> 'capped'", 7
        )
        taken = claim(conn, ["capped", "other", "plain"], 8)
        running = rows(
            dsn, "SELECT count(*) FROM workflows WHERE workflow_type = 'capped' AND status = 'running'"
        )
    assert sorted(taken) == sorted(expected)
    assert running == [(2,)]


def test_a_per_key_limit_holds_back_and_its_allowed_runs_go_in_order(dsn: str) -> None:
    """tenant: 1 per key. Keys a, b and c have three runs each; the unlimited type's runs are
    older than b's and c's and younger than a's. Of tenant only the first run of each key may
    go (c's at priority 1), and the batch takes those and the unlimited runs in order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "tenant", key_concurrency=1)
        add_runs(conn, "tenant", 3, age=30, key="a")
        add_runs(conn, "tenant", 3, age=10, key="b")
        add_runs(conn, "tenant", 3, age=5, key="c", priority=1)
        add_runs(conn, "plain", 4, age=20)
        allowed = (
            "workflow_type = 'plain' OR id IN (SELECT DISTINCT ON (concurrency_key) id FROM workflows"
            " WHERE workflow_type = 'tenant' ORDER BY concurrency_key, priority DESC, run_at, id)"
        )
        expected = in_claim_order(conn, allowed, 6)
        taken = claim(conn, ["plain", "tenant"], 6)
        keys = rows(dsn, "SELECT concurrency_key FROM workflows WHERE id = ANY(%s) ORDER BY 1", taken)
    assert sorted(taken) == sorted(expected)
    assert [k for (k,) in keys] == ["a", "c", None, None, None, None]  # b's run is younger


def test_keys_whose_runs_lost_to_older_work_keep_their_turn(dsn: str) -> None:
    """tenant: 1 per key; keys a to d have a run each, and the unlimited type two runs older
    than all but a's. A claim of 3 takes a's run and the two unlimited ones: b, c and d were
    passed over by age, not visited, so the rotation goes on from b, and the next claim of 3
    takes b, c and d."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "tenant", key_concurrency=1)
        add_runs(conn, "tenant", 1, age=30, key="a")
        for key in ("b", "c", "d"):
            add_runs(conn, "tenant", 1, age=10, key=key)
        add_runs(conn, "plain", 2, age=20)
        expected = in_claim_order(conn, "true", 3)
        first = claim(conn, ["plain", "tenant"], 3)
        assert sorted(first) == sorted(expected)
        assert rows(dsn, "SELECT key_cursor FROM workflow_limits") == [("a",)]
        second = claim(conn, ["plain", "tenant"], 3)
        keys = rows(dsn, "SELECT concurrency_key FROM workflows WHERE id = ANY(%s) ORDER BY 1", second)
    assert [k for (k,) in keys] == ["b", "c", "d"]


def test_unlimited_runs_a_batch_leaves_behind_are_taken_from_the_frontier(dsn: str) -> None:
    """A batch cut by older limited runs leaves the later unlimited runs it looked at pending;
    the frontier stops at the last unlimited run taken, so the next claim from it takes them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        limit(conn, "bulk", concurrency=1000)
        add_runs(conn, "plain", 6, age=20)
        add_runs(conn, "bulk", 3, age=21)
        frontier = claims.Frontier(full_every=3600.0)
        first = claim(conn, ["bulk", "plain"], 6, frontier=frontier)
        assert len(first) == 6
        second = claim(conn, ["bulk", "plain"], 6, frontier=frontier)
        left = rows(dsn, "SELECT count(*) FROM workflows WHERE status = 'pending'")
    assert len(second) == 3 and left == [(0,)]


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_order_holds_under_any_plan(dsn: str, mode: str) -> None:
    """The worker's session forces generic plans (worker.session_setup): the same claim, made
    repeatedly in one session and rolled back, takes the urgent run every time."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        limit(setup, "bulk", concurrency=1000)
        add_runs(setup, "bulk", 100, age=10)
        add_runs(setup, "urgent", 1, priority=100)
        (urgent,) = in_claim_order(setup, "workflow_type = 'urgent'", 1)
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET plan_cache_mode = {mode}")
        for _ in range(7):  # past the custom plans PL/pgSQL tries first
            assert urgent in claim(conn, ["bulk", "urgent"], 8)
            conn.rollback()
