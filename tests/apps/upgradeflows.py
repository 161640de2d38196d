"""Workflows the rolling-upgrade test runs on two releases at once
(tests/process/test_rolling_upgrade.py): the workers of the last tagged release and of this tree
import this same file, so it uses only the API both have.

Each step function appends "<run id> <step> <pid>" to the file in $WFCTL_TEST_LOG outside its
checkpoint, so the test counts real executions and sees which process ran each. An order sleeps,
starts a child, writes one row of the application's table ``upgrade_ledger`` in a
transactional step (its primary key refuses a second), and waits for a message the test sends,
so runs are parked in every kind of wait while the releases change.
"""

from __future__ import annotations

import os
from typing import Any

import wfctl


def effect(wid: str, name: str, value: Any) -> Any:
    path = os.environ.get("WFCTL_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{wid} {name} {os.getpid()}\n")
    return value


def pay(conn: Any, wid: str, amount: int) -> int:
    # no effect line: a transactional step may run again when its commit was lost; the ledger's
    # primary key is what holds it to once
    conn.execute("INSERT INTO upgrade_ledger (workflow_id, amount) VALUES (%s, %s)", (wid, amount))
    return amount


@wfctl.workflow("upgrade_order", max_retries=0)
def order(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    wid = str(ctx.workflow_id)
    n = int(data["n"])
    ctx.step("reserve", effect, wid, "reserve", n)
    ctx.sleep(float(data.get("sleep", 0.2)))
    child = ctx.start_child("upgrade_item", {"n": n})
    paid = ctx.transaction("pay", lambda conn: pay(conn, wid, n))
    message = ctx.recv("go", timeout=120)
    made = ctx.wait(child)
    ctx.step("ship", effect, wid, "ship", None)
    return {"n": n, "paid": paid, "made": made, "message": message}


@wfctl.workflow("upgrade_item", max_retries=0)
def item(ctx: wfctl.Context, data: dict[str, Any]) -> int:
    return int(ctx.step("make", effect, str(ctx.workflow_id), "make", int(data["n"]) * 2))
