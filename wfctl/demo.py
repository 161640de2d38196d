"""`wfctl demo`: show a newcomer what wfctl is for, on a real database, in well under a minute.

Submits a few dozen orders of the built-in ``demo-order`` workflow, one whose email step fails
once (retried with backoff) and one whose worker is killed with SIGKILL in the middle of a step
(the other worker notices the missed heartbeats, requeues the dead worker's runs itself and
finishes them: no ``wfctl recover`` involved), and a ``demo-bulk-order`` that checks stock in ten
warehouses as child workflows, joins them, and waits parked for an approval, which the demo
sends with ``wfctl send`` as a user would; it runs workers until all of them are done.
Everything it creates stays in the database for ``stats``, ``list`` and ``show``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any
from uuid import UUID

import psycopg

from wfctl import client, coordination, validate
from wfctl.queries import q

APP = "wfctl.demo_app"
TYPE = "demo-order"
BULK_TYPE = "demo-bulk-order"
APPROVAL = '{"approved_by": "manager"}'
TIMEOUT = 120.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    ids: list[UUID]
    flaky: UUID
    crashed: UUID
    bulk: UUID  # the order that fanned out to stock checks and waited for an approval
    checks: int  # its child workflows
    requeued: int  # runs the killed worker held, requeued by the other worker's sweep...
    requeued_after: float  # ...this many seconds after the kill
    seconds: float


def _worker(dsn: str, *args: str, log: IO[str] | None) -> subprocess.Popen[str]:
    env = {**os.environ, "WFCTL_DSN": dsn}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wfctl",
            "worker",
            "--app",
            APP,
            "--log-format",
            "plain",
            "--poll",
            "200ms",
            "--heartbeat",
            "500ms",
            *args,
        ],
        env=env,
        stdout=log,
        stderr=log,
        text=True,
    )


def _wait(what: str, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo timed out waiting for {what}")
        time.sleep(0.05)


def run(
    conn: psycopg.Connection[Any], dsn: str, say: Say, *, orders: int = 30, log: IO[str] | None = None
) -> DemoResult:
    began = time.monotonic()
    inputs = [
        validate.encode_input({"amount": 10 + i, "sku": f"SKU-{i:03d}", "email": f"c{i}@example.com"})
        for i in range(orders)
    ]
    with conn.transaction():
        ids = client.submit_many(conn, TYPE, inputs)
        crashed = client.submit_one(
            conn,
            TYPE,
            validate.encode_input(
                {"amount": 42, "sku": "SKU-CRASH", "email": "crash@example.com", "crash": True}
            ),
        ).id
    everyone = [*ids, crashed]
    say(
        f"submitted {len(everyone)} orders of workflow type {TYPE!r} (4 steps each: "
        "charge, reserve, ship, email)"
    )

    first = _worker(dsn, "--concurrency", "8", log=log)
    second: subprocess.Popen[str] | None = None
    try:
        say("worker 1 started; one order hangs in its 'ship' step...")
        _wait(
            "the hanging order to reach 'ship'",
            lambda: _step(conn, crashed) >= 2 and _finished(conn, ids) >= len(ids) // 2,
        )
        second = _worker(dsn, "--concurrency", "8", log=log)
        say("worker 2 started beside it")
        owner = _wait_for_id(conn, first.pid)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        killed = time.monotonic()
        held = _held(conn, owner)
        say(
            f"killed worker 1 with SIGKILL while order {crashed} was inside 'ship' (steps 1-2 "
            f"checkpointed); it held {held} run(s)"
        )
        # nobody runs `wfctl recover`: worker 2 sees worker 1 miss its heartbeats and requeues
        # its runs itself (the sweep), then claims them
        _wait("worker 2 to requeue the dead worker's orders", lambda: _held(conn, owner) == 0)
        after = time.monotonic() - killed
        say(
            f"worker 2 saw worker 1 miss its heartbeats and requeued its {held} run(s) "
            f"{after:.1f}s after the kill (no `wfctl recover` needed); it resumes the crashed "
            "order after its last checkpoint"
        )
        flaky = client.submit_one(
            conn,
            TYPE,
            validate.encode_input(
                {"amount": 99, "sku": "SKU-FLAKY", "email": "flaky@example.com", "flaky": True}
            ),
        ).id
        everyone.append(flaky)
        say(f"submitted order {flaky}, whose mail server times out on the first try")
        bulk, checks = _bulk_order(conn, dsn, say)
        everyone.append(bulk)
        _wait("every order to finish", lambda: _finished(conn, everyone) == len(everyone))
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.kill()
    return DemoResult(everyone, flaky, crashed, bulk, checks, held, after, time.monotonic() - began)


def _bulk_order(conn: psycopg.Connection[Any], dsn: str, say: Say) -> tuple[UUID, int]:
    """Submit the bulk order, let it fan out and join, then send the approval it parks for with
    ``wfctl send``, the command a user or a script would run. Returns its id and how many
    child workflows it started."""
    bulk = client.submit_one(
        conn, BULK_TYPE, validate.encode_input({"amount": 4800, "sku": "SKU-BULK", "units": 400})
    ).id
    say(
        f"submitted bulk order {bulk}: it checks stock in every warehouse, one child workflow "
        "each, waits for all of them, then waits for a manager's approval"
    )
    _wait("the bulk order to wait for its approval", lambda: _waiting_for(conn, bulk) == "message")
    stock = coordination.get_event(conn, bulk, "stock")
    row = conn.execute(q("demo.parks"), {"id": bulk}).fetchone()
    joined = (
        "the last one to finish woke it, once"
        if row and row[0] >= 2
        else "they were all done before it had to wait"
    )
    say(
        f"its {stock['warehouses']} stock checks are done ({stock['units']} units in stock; "
        f"{joined}); now it waits parked on the topic 'approval', holding no worker slot"
    )
    command = ["wfctl", "send", str(bulk), "approval", APPROVAL]
    sent = subprocess.run(
        [sys.executable, "-m", *command],
        env={**os.environ, "WFCTL_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if sent.returncode != 0:
        raise RuntimeError(f"`wfctl send` failed ({sent.returncode}): {sent.stderr.strip()}")
    say(f"sent the approval: {' '.join(command[:-1])} '{APPROVAL}'")
    for line in (sent.stdout + sent.stderr).splitlines():
        say(f"  {line.removeprefix('wfctl: ')}")
    return bulk, int(stock["warehouses"])


def _finished(conn: psycopg.Connection[Any], ids: list[UUID]) -> int:
    row = conn.execute(q("demo.progress"), {"ids": ids}).fetchone()
    return int(row[0]) if row else 0


def _wait_for_id(conn: psycopg.Connection[Any], pid: int) -> str:
    """The worker id of the worker process ``pid`` on this host (once it has registered)."""
    found: list[str] = []

    def registered() -> bool:
        row = conn.execute(q("demo.worker_id"), {"hostname": socket.gethostname(), "pid": pid}).fetchone()
        if row:
            found.append(row[0])
        return bool(row)

    _wait(f"worker {pid} to register", registered)
    return found[0]


def _held(conn: psycopg.Connection[Any], owner: str) -> int:
    row = conn.execute(q("demo.held"), {"owner": owner}).fetchone()
    return int(row[0]) if row else 0


def _waiting_for(conn: psycopg.Connection[Any], wid: UUID) -> str | None:
    row = conn.execute(q("demo.waiting_for"), {"id": wid}).fetchone()
    return row[0] if row else None


def _step(conn: psycopg.Connection[Any], wid: UUID) -> int:
    row = conn.execute(q("demo.current_step"), {"id": wid}).fetchone()
    return int(row[0]) if row else 0
