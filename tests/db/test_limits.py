"""Flow control in the claim: global concurrency limits, rate limits, per-key limits with
fairness, enforced by the claim across every worker, and changed at run time (the same on real
workers: tests/process/test_limits_workers.py).

Leases are sampled in the database: a statement trigger on workflows records, after every
statement that changes workflows, how many runs of each type (and key) hold a lease, counted
in a fresh snapshot. Claims of a limited type are serialized on the limit's row, so the sample
a claim takes is the exact number right after it; between claims the number only falls."""

from __future__ import annotations

import threading

import psycopg
import pytest
from helpers import rows, wait_for

import wfctl
from wfctl import client
from wfctl.worker import claims


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
