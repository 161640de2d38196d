"""The naive baseline: a worker for the reference design, as a team would first write it.

One workflow at a time per process, polling every 100 ms when idle, and for every step a SELECT
(was it done already?) and two commits (step 'running', then step 'completed' with its output
together with the workflow's progress). Per workflow of S steps that is 2*S + 2 commits:

    claim     SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1; UPDATE status='running'    commit
    step i    SELECT workflow_steps; INSERT step 'running'                           commit
              run the step
              UPDATE step 'completed' + output; UPDATE workflows current_step        commit
    finish    UPDATE workflows status='completed'                                    commit

It uses only the reference design's tables and columns (plus ``started_at``, which the wfctl
schema has, so that the benchmark can measure submit-to-start latency the same way on both
sides) and only plain psycopg 3: no pipeline, no batching, psycopg's default prepare threshold.

    python bench/naive.py --dsn DSN [--type naive3] [--exit-when-idle]

A workflow's input is ``{"steps": S}``; step i (1-based) is named ``s<i>`` and returns i - 1,
like ``bench/noop_app.py``. SIGTERM or SIGINT: finish the current workflow, then exit.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

POLL_INTERVAL = 0.1  # seconds between polls when nothing is pending

CLAIM = """
    SELECT id, input_data
    FROM workflows
    WHERE status = 'pending' AND workflow_type = %(type)s
    ORDER BY created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
"""
MARK_RUNNING = """
    UPDATE workflows
    SET status = 'running', started_at = now(), updated_at = now()
    WHERE id = %(id)s
"""
STEP_DONE = """
    SELECT status, output_data
    FROM workflow_steps
    WHERE workflow_id = %(id)s AND step_number = %(n)s
"""
STEP_START = """
    INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, started_at)
    VALUES (%(id)s, %(n)s, %(name)s, 'running', now())
    ON CONFLICT (workflow_id, step_number)
        DO UPDATE SET status = 'running', started_at = now(), error_message = NULL
"""
STEP_COMPLETE = """
    UPDATE workflow_steps
    SET status = 'completed', output_data = %(output)s, completed_at = now()
    WHERE workflow_id = %(id)s AND step_number = %(n)s
"""
PROGRESS = """
    UPDATE workflows SET current_step = %(n)s, updated_at = now() WHERE id = %(id)s
"""
STEP_FAIL = """
    UPDATE workflow_steps
    SET status = 'failed', error_message = %(error)s, completed_at = now()
    WHERE workflow_id = %(id)s AND step_number = %(n)s
"""
FINISH = """
    UPDATE workflows
    SET status = %(status)s, error_message = %(error)s, updated_at = now()
    WHERE id = %(id)s
"""


def noop(i: int) -> int:
    return i


class NaiveWorker:
    def __init__(self, conn: psycopg.Connection[Any], workflow_type: str) -> None:
        self.conn = conn
        self.workflow_type = workflow_type
        self.stopping = False
        self.done = 0

    def claim(self) -> tuple[UUID, dict[str, Any]] | None:
        row = self.conn.execute(CLAIM, {"type": self.workflow_type}).fetchone()
        if row is None:
            self.conn.commit()
            return None
        self.conn.execute(MARK_RUNNING, {"id": row[0]})
        self.conn.commit()
        return row[0], row[1] or {}

    def run(self, workflow_id: UUID, data: dict[str, Any]) -> None:
        for i in range(int(data.get("steps", 3))):
            n = i + 1
            key = {"id": workflow_id, "n": n}
            done = self.conn.execute(STEP_DONE, key).fetchone()
            if done is not None and done[0] == "completed":
                continue  # replay: the stored output stands in for the step
            self.conn.execute(STEP_START, {**key, "name": f"s{n}"})
            self.conn.commit()
            try:
                output = noop(i)
            except Exception as exc:
                self.conn.execute(STEP_FAIL, {**key, "error": repr(exc)})
                self.conn.execute(FINISH, {"id": workflow_id, "status": "failed", "error": repr(exc)})
                self.conn.commit()
                return
            self.conn.execute(STEP_COMPLETE, {**key, "output": Jsonb(output)})
            self.conn.execute(PROGRESS, key)
            self.conn.commit()
        self.conn.execute(FINISH, {"id": workflow_id, "status": "completed", "error": None})
        self.conn.commit()
        self.done += 1

    def loop(self, exit_when_idle: bool) -> None:
        while not self.stopping:
            claimed = self.claim()
            if claimed is None:
                if exit_when_idle:
                    return
                time.sleep(POLL_INTERVAL)
                continue
            self.run(*claimed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="libpq DSN of the database")
    parser.add_argument("--type", default="naive3", help="workflow_type to run (default: naive3)")
    parser.add_argument(
        "--exit-when-idle", action="store_true", help="exit as soon as no workflow is pending"
    )
    args = parser.parse_args(argv)

    with psycopg.connect(args.dsn) as conn:
        worker = NaiveWorker(conn, args.type)

        def stop(signum: int, frame: object) -> None:
            worker.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker.loop(args.exit_when_idle)
    print(json.dumps({"completed": worker.done}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
