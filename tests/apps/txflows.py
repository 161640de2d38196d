"""Workflows for the transactional-step tests (tests/test_transaction_step.py): each entry is
written to the application's own table through ``ctx.transaction``, with a random pause inside
the transaction so that kills land before, inside and after it."""

from __future__ import annotations

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


@wfctl.workflow("ledger_fails", max_retries=0)
def ledger_fails(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    def write_then_fail(conn: Any) -> None:
        conn.execute("INSERT INTO app_ledger (workflow_id, entry) VALUES (%s, 0)", (str(ctx.workflow_id),))
        raise ValueError("refused after writing")

    ctx.transaction("doomed", write_then_fail)
