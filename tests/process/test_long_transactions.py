"""A submit or a wake-up committed by an application transaction that began before the worker's
last claim: its rows carry that transaction's start as their time (``now()``), which sorts
behind what the worker has claimed since. It must still be claimed at its commit's NOTIFY,
whatever ``--poll`` is."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from helpers import rows, wait_for
from test_wakeups_during_statements import LONG, PROMPT, status

import wfctl
from wfctl.worker import claims

# The engine's promises here hold in both table layouts: each test runs in each.
pytestmark = [pytest.mark.slow, pytest.mark.layouts]


def claimed_since(dsn: str, app: psycopg.Connection[Any]) -> None:
    """Make the worker claim and finish a run submitted after ``app``'s transaction began."""
    started = app.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    later = wfctl.submit(dsn, "three", {})
    wait_for(lambda: status(dsn, later) == "completed", what="the later run to complete")
    run_at = rows(dsn, "SELECT run_at FROM workflows WHERE id = %s", later)[0][0]
    assert run_at > started


def test_a_submit_committed_by_a_transaction_older_than_the_last_claim_is_claimed_at_once(
    dsn: str, workers: Any
) -> None:
    workers.start("--poll", LONG, "--heartbeat", LONG, app="coordflows")
    with psycopg.connect(dsn) as app:
        claimed_since(dsn, app)
        late = wfctl.submit(app, "three", {})
        app.commit()
    wait_for(
        lambda: status(dsn, late) == "completed",
        timeout=PROMPT,
        what=f"the run submitted in the older transaction to complete (the poll is {LONG} away)",
    )


def test_a_message_sent_by_a_transaction_older_than_the_last_claim_wakes_its_run_at_once(
    dsn: str, workers: Any
) -> None:
    workers.start("--poll", LONG, "--heartbeat", LONG, app="coordflows")
    parked = wfctl.submit(dsn, "approval", {"order": 7})
    wait_for(
        lambda: (
            rows(dsn, "SELECT status, wait_kind FROM workflows WHERE id = %s", parked)
            == [("pending", "message")]
        ),
        what="the approval run to park in its recv",
    )
    with psycopg.connect(dsn) as app:
        claimed_since(dsn, app)
        wfctl.send(app, parked, "approval", "yes")
        app.commit()
    wait_for(
        lambda: status(dsn, parked) == "completed",
        timeout=PROMPT,
        what=f"the run woken by the older transaction to complete (the poll is {LONG} away)",
    )


def test_a_submit_announced_at_or_before_the_claims_key_or_floor_makes_the_next_claim_scan_from_the_head():
    at = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    us = int(at.timestamp()) * 1_000_000
    frontier = claims.Frontier(key=(3, at, uuid.uuid4()))
    assert frontier.passed(claims.Announced(3, us - 1, us - 1))  # earlier run_at
    assert frontier.passed(claims.Announced(3, us, us))  # the same key: maybe before its id
    assert frontier.passed(claims.Announced(4, us + 10, us + 10))  # a higher priority sorts first
    assert not frontier.passed(claims.Announced(3, us + 1, us + 1))
    assert not frontier.passed(claims.Announced(2, us - 10, us - 10))  # lower priority: after
    # the partitioned layout: claims between scans from the head read from the floor on
    frontier.bounded, frontier.floor = True, at
    assert frontier.passed(claims.Announced(2, us + 10, us - 1))
    assert not frontier.passed(claims.Announced(2, us + 10, us))
    assert not claims.Frontier().passed(claims.Announced(0, 0, 0))  # no key: from the head anyway
