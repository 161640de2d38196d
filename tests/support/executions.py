"""Running a workflow in the test's own process with the worker's code: one claim, and an
``Execution`` whose every write is flushed, and every coordination step run, at once on the
same connection (no worker loop, no thread). For database-tier tests of what an execution
writes and what the next claim reads."""

from __future__ import annotations

import io
import threading

import psycopg

from wfctl.registry import Registry
from wfctl.worker import calls, claims
from wfctl.worker.checkpoints import Request, flush
from wfctl.worker.execution import Execution
from wfctl.worker.log import WorkerLog
from wfctl.worker.transactions import TransactionPool


def execute(dsn: str, registry: Registry, *, pool: TransactionPool | None = None) -> Execution:
    """Claim the one runnable workflow of ``registry``'s types and run it to its end here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        policies = {name: claims.Policy(wt.max_retries) for name, wt in registry.types.items()}
        [claimed] = claims.claim(conn, "tester", policies, 1, claims.Frontier()).claimed

        def send(request: object) -> None:
            if isinstance(request, calls.Call):  # a coordination step: run here, as the loop would
                calls.execute(conn, request)
                return
            assert isinstance(request, Request)
            flush(conn, [request])

        execution = Execution(
            claimed,
            registry.types[claimed.workflow_type],
            send,
            threading.Event(),
            WorkerLog("plain", stream=io.StringIO()),
            pool,
        )
        execution.run()
    return execution
