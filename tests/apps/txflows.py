"""Workflows for the transactional-step tests (tests/db/test_transaction_step.py, and one in
tests/process/test_pgbouncer.py). Each entry is written to the application's own table ``app_ledger``
through ``ctx.transaction``: with a random pause inside the transaction, so that kills land
before, inside and after it (``ledger``), or held inside ``fn`` while the file
$WFCTL_TEST_GATE exists (``held``), so that a test can freeze, cancel or outlive it there."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import wfctl


def debit(conn: Any, wid: str, entry: int, pause: float) -> int:
    conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, %s)", (wid, entry))
    time.sleep(random.uniform(0, pause))
    return entry


@wfctl.workflow("ledger", max_retries=50, retry_base=0.01, retry_cap=0.05)
def ledger(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    wid = str(ctx.workflow_id)
    pause = data.get("pause", 0.02)
    total = 0
    for entry in range(data["entries"]):
        total += ctx.transaction(f"debit-{entry}", lambda conn, entry=entry: debit(conn, wid, entry, pause))
        ctx.step(f"between-{entry}", time.sleep, random.uniform(0, pause))
    return total


def wait_at_gate(limit: float = 30.0) -> None:
    gate = os.environ.get("WFCTL_TEST_GATE")
    until = time.monotonic() + limit
    while gate and os.path.exists(gate) and time.monotonic() < until:
        time.sleep(0.01)


@wfctl.workflow("held", max_retries=2)
def held(ctx: wfctl.Context, data: Any) -> dict[str, Any]:
    """One entry, written and then held inside the transaction while the gate file exists."""
    wid = str(ctx.workflow_id)

    def write_and_wait(conn: Any) -> dict[str, Any]:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (wid,))
        wait_at_gate()
        return {"attempt": ctx.attempt, "pid": os.getpid()}

    return ctx.transaction("held", write_and_wait)


@wfctl.workflow("ledger_fails", max_retries=0)
def ledger_fails(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    def write_then_fail(conn: Any) -> None:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (str(ctx.workflow_id),))
        raise ValueError("refused after writing")

    ctx.transaction("doomed", write_then_fail)


@wfctl.workflow("ledger_flaky", max_retries=2, retry_base=0.01, retry_cap=0.01)
def ledger_flaky(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    """Writes and fails on its first attempt, writes and succeeds on the second."""

    def write(conn: Any) -> int:
        conn.execute(
            "INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, %s)", (str(ctx.workflow_id), ctx.attempt)
        )
        if ctx.attempt == 1:
            raise ConnectionResetError("the payment provider hung up")
        return ctx.attempt

    return ctx.transaction("write", write)


@wfctl.workflow("ledger_unstorable", max_retries=0)
def ledger_unstorable(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    def write(conn: Any) -> set[int]:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (str(ctx.workflow_id),))
        return {1, 2}

    ctx.transaction("write", write)


@wfctl.workflow("ledger_nested", max_retries=3)
def ledger_nested(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    def write(conn: Any) -> int:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (str(ctx.workflow_id),))
        return ctx.step("inner", lambda: 1)

    ctx.transaction("outer", write)


@wfctl.workflow("ledger_commits", max_retries=3)
def ledger_commits(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    def write(conn: Any) -> int:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (str(ctx.workflow_id),))
        conn.execute("COMMIT")
        return 0

    ctx.transaction("write", write)
