"""Flow control on real workers: global concurrency limits, rate limits, per-key
limits with fairness, enforced by the claim across every worker, and changed at run time.

Leases are sampled in the database: a statement trigger on workflows records, after every
statement that changes workflows, how many runs of each type (and key) hold a lease, counted
in a fresh snapshot. Claims of a limited type are serialized on the limit's row, so the sample
a claim takes is the exact number right after it; between claims the number only falls."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import client, jsonvalue
from wfctl.worker import claims

APP = "limitflows"

SAMPLER = """
CREATE TABLE lease_samples (at timestamptz NOT NULL, workflow_type text NOT NULL,
                            concurrency_key text, running integer NOT NULL);
CREATE FUNCTION sample_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO lease_samples
    SELECT clock_timestamp(), workflow_type, NULL, count(*) FROM workflows
    WHERE status = 'running' GROUP BY workflow_type;
    INSERT INTO lease_samples
    SELECT clock_timestamp(), workflow_type, concurrency_key, count(*) FROM workflows
    WHERE status = 'running' AND concurrency_key IS NOT NULL GROUP BY workflow_type, concurrency_key;
    RETURN NULL;
END $$;
CREATE TRIGGER sample_leases AFTER UPDATE ON workflows
    FOR EACH STATEMENT EXECUTE FUNCTION sample_leases();
"""


@pytest.fixture
def sampled(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SAMPLER)
    return dsn


def most_leases(dsn: str, workflow_type: str) -> int:
    return rows(
        dsn,
        "SELECT coalesce(max(running), 0) FROM lease_samples WHERE workflow_type = %s"
        " AND concurrency_key IS NULL",
        workflow_type,
    )[0][0]


def finished(dsn: str, workflow_type: str) -> int:
    return rows(
        dsn, "SELECT count(*) FROM workflows WHERE workflow_type = %s AND status = 'completed'", workflow_type
    )[0][0]


def submit_batch(dsn: str, workflow_type: str, count: int, data: dict, **options: object) -> list:
    with psycopg.connect(dsn) as conn:
        return client.submit_many(conn, workflow_type, [jsonvalue.dumps(data)] * count, **options)


def wfctl_ok(workers, *args: str) -> str:
    result = workers.wfctl(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_concurrency_limit_holds_across_workers_and_is_reached(sampled: str, workers) -> None:
    submit_batch(sampled, "capped", 60, {"pause": 0.05})
    for _ in range(4):
        workers.start("--concurrency", "8", app=APP)
    wait_for(lambda: finished(sampled, "capped") == 60, timeout=60, what="60 capped runs")
    assert most_leases(sampled, "capped") == 3


def test_parked_runs_do_not_count_against_the_limit(dsn: str, workers) -> None:
    workers.start(app=APP)
    waiting = wfctl.submit(dsn, "gated", {"wait": True})
    wait_for(
        lambda: rows(dsn, "SELECT wait_kind FROM workflows WHERE id = %s", waiting)[0][0] == "message",
        what="the first run parks",
    )
    other = wfctl.submit(dsn, "gated", {"pause": 0})
    assert wfctl.result(dsn, other, timeout=30) == 0
    wfctl.send(dsn, waiting, "go", "done")
    assert wfctl.result(dsn, waiting, timeout=30) == "done"


def test_a_limit_set_at_run_time_applies_from_the_next_claim(sampled: str, workers) -> None:
    # paused: nothing runs
    submit_batch(sampled, "plain", 80, {"pause": 0.3})
    wfctl_ok(workers, "limit", "plain", "--concurrency", "0")
    workers.start("--concurrency", "8", app=APP)
    workers.start("--concurrency", "8", app=APP)
    wait_for(lambda: rows(sampled, "SELECT count(*) FROM workers")[0][0] == 2, what="two workers")
    time.sleep(0.5)  # several polls: a paused type is not claimed
    assert rows(sampled, "SELECT count(*) FROM workflows WHERE status <> 'pending'") == [(0,)]
    # raised: the idle workers are woken and claim at once, up to the limit
    wfctl_ok(workers, "limit", "plain", "--concurrency", "2")
    wait_for(
        lambda: rows(sampled, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0] == 2,
        timeout=5,
        what="two runs under the new limit",
    )
    wfctl_ok(workers, "limit", "plain", "--concurrency", "5")
    wait_for(
        lambda: rows(sampled, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0] == 5,
        timeout=5,
        what="five runs under the raised limit",
    )
    # cleared: no limit at all, everything drains
    wfctl_ok(workers, "limit", "plain", "--clear")
    wait_for(lambda: finished(sampled, "plain") == 80, timeout=60, what="the rest")
    assert most_leases(sampled, "plain") > 5


def test_a_rate_limit_spreads_starts_evenly_across_workers(dsn: str, workers) -> None:
    """metered: rate 20/s in code. Over 15 s: 300 starts +-10 %, none far above the rate in any
    second, none of the seconds empty."""
    submit_batch(dsn, "metered", 420, {"n": 1})
    for _ in range(3):
        workers.start("--concurrency", "8", app=APP)
    wait_for(lambda: finished(dsn, "metered") >= 1, what="the first start")
    first = rows(dsn, "SELECT min(started_at) FROM workflow_attempts")[0][0]
    wait_for(
        lambda: rows(dsn, "SELECT now() > %s + interval '15.5 seconds'", first)[0][0],
        timeout=30,
        what="15 s of starts",
    )
    started = rows(
        dsn,
        "SELECT count(*) FROM workflow_attempts WHERE started_at < %s + interval '15 seconds'",
        first,
    )[0][0]
    per_second = [
        n
        for (n,) in rows(
            dsn,
            "SELECT count(a.started_at) FROM generate_series(0, 14) AS s(i)"
            " LEFT JOIN workflow_attempts a ON a.started_at >= %s + make_interval(secs => s.i)"
            " AND a.started_at < %s + make_interval(secs => s.i + 1) GROUP BY s.i ORDER BY s.i",
            first,
            first,
        )
    ]
    print(f"\nrate 20/s for 15 s: {started} starts; per second {per_second}")
    assert 270 <= started <= 330
    assert min(per_second) >= 10 and max(per_second) <= 24  # 20 a second and a burst of 4


def test_a_per_key_limit_is_fair_to_a_small_key_behind_a_huge_backlog(sampled: str, workers) -> None:
    """tenant: 2 per key in code. Key A holds 10,000 pending runs; key B's 10 runs, submitted
    after them, all finish within a few claim rounds, and no key ever runs more than 2."""
    submit_batch(sampled, "tenant", 10_000, {"pause": 0.02}, concurrency_key="A")
    small = submit_batch(sampled, "tenant", 10, {"pause": 0.02}, concurrency_key="B")
    workers.start("--concurrency", "8", app=APP)
    workers.start("--concurrency", "8", app=APP)
    for wid in small:
        wfctl.result(sampled, wid, timeout=30)
    done_a = rows(
        sampled,
        "SELECT count(*) FROM workflows WHERE concurrency_key = 'A' AND status = 'completed'",
    )[0][0]
    # B's 10 runs, 2 at a time: 5 rounds of its own; A advanced 2 at a time meanwhile
    print(f"\nkey B's 10 runs finished while key A finished {done_a} of 10,000")
    assert done_a <= 40
    most = rows(
        sampled,
        "SELECT concurrency_key, max(running) FROM lease_samples WHERE concurrency_key IS NOT NULL"
        " GROUP BY 1 ORDER BY 1",
    )
    assert most == [("A", 2), ("B", 2)]


# -- regressions (found in review) --------------------------------------------------------------


def test_a_run_committed_while_a_claim_waits_for_the_limit_is_not_charged_and_stays_runnable(
    dsn: str,
) -> None:
    """wfctl_claim_allowed picks in fresh snapshots; the claim's UPDATE reads the statement's
    older snapshot. A run committed in between is picked but not claimed: it must not be charged
    to the rate (at 1/1h the type would then wait an hour), and the next claim takes it."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO workflow_limits (workflow_type, rate_count, rate_seconds) VALUES ('plain', 1, 3600)"
        )
    app = psycopg.connect(dsn)
    wid = wfctl.submit(app, "plain", {})  # in the application's transaction, not committed yet
    holder = psycopg.connect(dsn)
    holder.execute("SELECT 1 FROM workflow_limits WHERE workflow_type = 'plain' FOR UPDATE")
    result: dict[str, claims.Batch] = {}

    def claim() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            result["batch"] = claims.claim(conn, "w1", {"plain": claims.Policy(max_retries=0)}, 4)

    thread = threading.Thread(target=claim)
    thread.start()
    wait_for(
        lambda: (
            rows(
                dsn,
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )[0][0]
            == 1
        ),
        what="the claim to wait for the limit's row",
    )
    app.commit()
    app.close()
    holder.commit()
    holder.close()
    thread.join(30)
    assert [c.id for c in result["batch"].claimed] == []
    assert rows(dsn, "SELECT rate_tat FROM workflow_limits") == [(None,)]  # not charged
    with psycopg.connect(dsn, autocommit=True) as conn:
        again = claims.claim(conn, "w1", {"plain": claims.Policy(max_retries=0)}, 4)
    assert [c.id for c in again.claimed] == [wid]
    assert rows(dsn, "SELECT rate_tat > now() + interval '59 minutes' FROM workflow_limits") == [(True,)]


def test_a_burst_worker_exits_when_its_type_is_paused(dsn: str, workers) -> None:
    wfctl.submit(dsn, "plain", {})
    wfctl_ok(workers, "limit", "plain", "--concurrency", "0")
    log = workers.run(app=APP, timeout=30)
    assert "1 workflow(s) of its types paused" in log
    assert rows(dsn, "SELECT status FROM workflows") == [("pending",)]


def test_keys_holding_only_parked_runs_do_not_use_up_the_key_walk(dsn: str) -> None:
    """100 keys whose only runs are parked come before the one key with a runnable run: one
    claim finds it (the walk visits keys with a runnable run only)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO workflow_limits (workflow_type, key_concurrency) VALUES ('tenant', 2)")
        conn.execute(
            "INSERT INTO workflows (workflow_type, concurrency_key, run_at)"
            " SELECT 'tenant', 'k' || lpad(i::text, 3, '0'), now() + interval '1 hour'"
            " FROM generate_series(1, 100) i"
        )
        conn.execute("INSERT INTO workflows (workflow_type, concurrency_key) VALUES ('tenant', 'zzz')")
        batch = claims.claim(conn, "w1", {"tenant": claims.Policy(max_retries=0)}, 4)
    assert len(batch.claimed) == 1


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_key_walk_probes_the_index_under_any_plan(dsn: str, mode: str) -> None:
    """The worker forces generic plans (worker.session_setup). The key probe must still seek in
    workflows_keyed_pending_idx, not read the keyed entries from the first key up to the cursor:
    100,000 pending keyed runs over 1,000 keys, the cursor half-way, a claim of 16 reads a few
    hundred index entries (each key's probe and pick), not tens of thousands."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_limits (workflow_type, key_concurrency, key_cursor)"
            " VALUES ('tenant', 2, 'k0500')"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, concurrency_key)"
            " SELECT 'tenant', 'k' || lpad((i % 1000)::text, 4, '0') FROM generate_series(1, 100000) i"
        )
        conn.execute("VACUUM ANALYZE workflows")
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET plan_cache_mode = {mode}")
        for _ in range(6):  # past the custom plans PL/pgSQL tries first
            assert len(claims.claim(conn, "w1", {"tenant": claims.Policy(max_retries=0)}, 16).claimed) == 16
            conn.rollback()  # the cursor stays half-way
        claims.claim(conn, "w1", {"tenant": claims.Policy(max_retries=0)}, 16)
        read = conn.execute(
            "SELECT pg_stat_get_xact_tuples_returned('workflows_keyed_pending_idx'::regclass)"
        ).fetchone()[0]
        conn.rollback()
    print(f"\n{mode}: {read} index entries read")
    assert read < 2000, read


def test_a_per_key_limit_and_a_rate_on_one_type_claim_together(dsn: str) -> None:
    """The key rotation's cursor and the rate's charge are one write of the limit's row (a second
    write of a row within one statement is refused: every claim failed)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_limits (workflow_type, key_concurrency, rate_count, rate_seconds)"
            " VALUES ('tenant', 2, 1000, 1)"
        )
        for key in ("a", "b", "c"):
            client.submit_many(conn, "tenant", ["{}"] * 3, concurrency_key=key)
        batch = claims.claim(conn, "w1", {"tenant": claims.Policy(max_retries=0)}, 5)
    assert sorted(c.workflow_type for c in batch.claimed) == ["tenant"] * 5
    assert rows(dsn, "SELECT key_cursor, rate_tat IS NOT NULL FROM workflow_limits") == [("c", True)]
