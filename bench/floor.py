"""The throughput floor: wfctl's row writes with no engine code (bench/throughput.py).

    python bench/floor.py --dsn DSN [--type floor3] [--steps 3] [--batch 32]

One process, one connection, a loop: claim up to 32 runnable runs of its type with a lease (one
statement) and commit; for each step 1..S one statement that writes the 32 step rows and moves
current_step, and commit; one statement completing the 32, and commit. When nothing is left it
polls every 20 ms. No Python step logic, no LISTEN, no pipeline: psycopg's defaults plus
``prepare_threshold=0`` (every statement prepared at its first use), as wfctl's worker has.
The statements are bench/floor.sql; the session first turns bitmap scans and sorts off, so that
the claim reads the runnable index in order and stops after the batch whatever the statistics say
(``--default-plans`` leaves them on: on a table that has just received N rows the claim then
scans and sorts all of them).

It prints ``ready`` once connected. SIGTERM or SIGINT: finish the batch in hand, then exit 0; it
also stops when the process that started it is gone.
A write that does not change every run of its batch (a lease lost: nothing else runs this type)
is an error: exit 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from wfctl.queries import parse_blocks

SQL = parse_blocks(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))
POLL = 0.02  # seconds between claims while nothing is runnable
APPLICATION = "wfctl-bench-floor"  # how bench/throughput.py finds this process's backend


class Stop:
    requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="libpq DSN of a database with the wfctl schema")
    parser.add_argument("--type", default="floor3", help="workflow_type to run (default floor3)")
    parser.add_argument("--steps", type=int, default=3, help="steps per run (default 3)")
    parser.add_argument("--batch", type=int, default=32, help="runs per claim (default 32)")
    parser.add_argument(
        "--default-plans",
        action="store_true",
        help="leave the planner's defaults: the claim may scan and sort the whole runnable set",
    )
    args = parser.parse_args(argv)
    stop = Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    owner = f"{socket.gethostname()}:{os.getpid()}:floor"
    dsn = make_conninfo(args.dsn, application_name=APPLICATION)
    done = 0
    parent = os.getppid()
    with psycopg.connect(dsn, prepare_threshold=0) as conn:
        if not args.default_plans:
            conn.execute(SQL["session"])
            conn.commit()
        print("ready", flush=True)
        while not stop.requested and os.getppid() == parent:  # orphaned: the benchmark was killed
            rows = conn.execute(
                SQL["claim"], {"type": args.type, "batch": args.batch, "owner": owner}
            ).fetchall()
            conn.commit()
            if not rows:
                time.sleep(POLL)
                continue
            batch = {"ids": [r[0] for r in rows], "epochs": [r[1] for r in rows]}
            for step in range(1, args.steps + 1):
                written = conn.execute(SQL["step"], {**batch, "step": step}).rowcount
                conn.commit()
                if written != len(rows):
                    print(f"floor: step {step} wrote {written} of {len(rows)} rows", file=sys.stderr)
                    return 1
            completed = conn.execute(SQL["complete"], batch).rowcount
            conn.commit()
            if completed != len(rows):
                print(f"floor: completed {completed} of {len(rows)} runs", file=sys.stderr)
                return 1
            done += completed
    print(f"floor: completed {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
