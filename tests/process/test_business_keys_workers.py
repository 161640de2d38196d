"""A run named by its business key, with a real worker: `wfctl wait --key` and `wfctl.result(...,
key=...)` wait for a run a worker is running and are woken by its end; `wfctl send --to-key` wakes
it from its `ctx.recv`. A worker runs tests/apps/waitflows.py.

The tests of business keys that need only the database are in tests/db/test_business_keys.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import APPS, rows, wait_for

import wfctl

APP = "waitflows"


def parked_on_a_message(dsn: str, wid: object) -> bool:
    return rows(dsn, "SELECT status, wait_kind FROM workflows WHERE id = %s", wid) == [("pending", "message")]


def test_wait_and_send_by_key_reach_the_run_a_worker_runs(dsn, workers):
    workers.start("--types", "approval", app=APP)
    wid = wfctl.submit(dsn, "approval", {"timeout": 3600}, key="order-7")
    wait_for(lambda: parked_on_a_message(dsn, wid), timeout=60, what="the approval to park on its message")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "wfctl", "wait", "--key", "order-7", "--timeout", "60s", "--json"],
        cwd=APPS,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the wait has marked the run awaited: it is listening for the run's end
        wait_for(
            lambda: rows(dsn, "SELECT awaited FROM workflows WHERE id = %s", wid) == [(True,)],
            what="the wait to ask for the run's announcement",
        )
        sent = workers.wfctl("send", "--to-key", "order-7", "approval", '{"ok": true}')
        assert sent.exit_code == 0, sent.output
        assert sent.stdout == f"sent message 1 to {wid} on 'approval'\n"
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait(timeout=10)
    assert waiting.returncode == 0, err
    assert json.loads(out) == {"id": str(wid), "status": "completed", "output": {"decision": {"ok": True}}}
    assert wfctl.result(dsn, key="order-7", timeout="30s") == {"decision": {"ok": True}}
    assert wfctl.get(dsn, key="order-7").status == "completed"
