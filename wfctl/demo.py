"""`wfctl demo`: show a newcomer what wfctl is for, on a real database, in well under a minute.

Submits a few dozen orders of the built-in ``demo-order`` workflow, one whose email step fails
once (retried with backoff) and one whose worker is killed with SIGKILL in the middle of a step
(recovered by ``wfctl recover`` and finished by another worker), and runs workers until all of
them are done. Everything it creates stays in the database for ``stats``, ``list`` and ``show``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, Any
from uuid import UUID

import psycopg

from wfctl import client, recovery, validate
from wfctl.queries import q

APP = "wfctl.demo_app"
TYPE = "demo-order"
TIMEOUT = 120.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoResult:
    ids: list[UUID]
    flaky: UUID
    crashed: UUID
    recovered: list[recovery.Recovered]
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
    try:
        say("worker 1 started; one order hangs in its 'ship' step...")
        _wait(
            "the hanging order to reach 'ship'",
            lambda: _step(conn, crashed) >= 2 and _finished(conn, ids) >= len(ids) // 2,
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        say(f"killed worker 1 with SIGKILL while order {crashed} was inside 'ship' (steps 1-2 checkpointed)")
    finally:
        if first.poll() is None:
            first.kill()

    recovered: list[recovery.Recovered] = []

    def recovered_it() -> bool:
        # as cron would: again until every run the dead worker held is requeued (a run that
        # moved just before the kill goes stale a little later than the others)
        recovered.extend(recovery.recover(conn, timedelta(seconds=2)))
        return any(r.id == crashed for r in recovered) and _running(conn, everyone) == 0

    _wait("recover to requeue the dead worker's orders", recovered_it)
    say(f"`wfctl recover --stale 2s` requeued {len(recovered)} run(s) whose worker stopped heartbeating")

    second = _worker(dsn, "--concurrency", "8", log=log)
    try:
        say("worker 2 started: it resumes the crashed order after its last checkpoint")
        flaky = client.submit_one(
            conn,
            TYPE,
            validate.encode_input(
                {"amount": 99, "sku": "SKU-FLAKY", "email": "flaky@example.com", "flaky": True}
            ),
        ).id
        everyone.append(flaky)
        say(f"submitted order {flaky}, whose mail server times out on the first try")
        _wait("every order to finish", lambda: _finished(conn, everyone) == len(everyone))
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
    return DemoResult(everyone, flaky, crashed, recovered, time.monotonic() - began)


def _finished(conn: psycopg.Connection[Any], ids: list[UUID]) -> int:
    row = conn.execute(q("demo.progress"), {"ids": ids}).fetchone()
    return int(row[0]) if row else 0


def _running(conn: psycopg.Connection[Any], ids: list[UUID]) -> int:
    row = conn.execute(q("demo.progress"), {"ids": ids}).fetchone()
    return int(row[1]) if row else 0


def _step(conn: psycopg.Connection[Any], wid: UUID) -> int:
    row = conn.execute(q("demo.current_step"), {"id": wid}).fetchone()
    return int(row[0]) if row else 0
