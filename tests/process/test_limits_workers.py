"""Flow control on real workers: global concurrency limits, rate limits, per-key limits with
fairness, enforced by the claim across every worker, and changed at run time.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_limits.py.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import client, jsonvalue

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


def claims_past_the_paused(dsn: str) -> bool:
    """One run of the unlimited type 'swift' through the workers; whether each of the two has
    now claimed one, every claim past the 80 older runs of the paused type."""
    wid = wfctl.submit(dsn, "swift", {})
    assert wfctl.result(dsn, wid, timeout="30s") == "swift"
    return (
        rows(
            dsn,
            "SELECT count(DISTINCT a.worker_id) FROM workflow_attempts a"
            " JOIN workflows w ON w.id = a.workflow_id WHERE w.workflow_type = 'swift'",
        )[0][0]
        == 2
    )


def test_a_limit_set_at_run_time_applies_from_the_next_claim(sampled: str, workers) -> None:
    # paused: nothing runs, while both workers claim runs of other types queued behind it
    submit_batch(sampled, "plain", 80, {"pause": 0.3})
    wfctl_ok(workers, "limit", "plain", "--concurrency", "0")
    # both workers poll (every 100 ms) rather than listen: of a listening pool only the worker
    # that holds the duty is woken, and the other would claim a quick run only at the rare poll
    # that falls while it is queued, so "each worker claimed one" would be a matter of luck
    workers.start("--concurrency", "8", "--no-listen", app=APP)
    workers.start("--concurrency", "8", "--no-listen", app=APP)
    wait_for(lambda: claims_past_the_paused(sampled), what="each worker to claim past the paused type")
    assert rows(
        sampled, "SELECT count(*) FROM workflows WHERE workflow_type = 'plain' AND status <> 'pending'"
    ) == [(0,)]
    # raised: the idle workers claim up to the limit
    wfctl_ok(workers, "limit", "plain", "--concurrency", "2")
    wait_for(
        lambda: rows(sampled, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0] == 2,
        what="two runs under the new limit",
    )
    wfctl_ok(workers, "limit", "plain", "--concurrency", "5")
    wait_for(
        lambda: rows(sampled, "SELECT count(*) FROM workflows WHERE status = 'running'")[0][0] == 5,
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


def test_a_burst_worker_exits_when_its_type_is_paused(dsn: str, workers) -> None:
    wfctl.submit(dsn, "plain", {})
    wfctl_ok(workers, "limit", "plain", "--concurrency", "0")
    log = workers.run(app=APP, timeout=30)
    assert "1 workflow(s) of its types paused" in log
    assert rows(dsn, "SELECT status FROM workflows") == [("pending",)]
