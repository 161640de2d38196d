"""The limits benchmark's chores inside one wfctl source tree (bench/limits.py runs this script).

    PYTHONPATH=TREE python bench/limits_job.py < COMMANDS

One JSON command per line on stdin, one reply per line on stdout ("ok", or "error: ..."):
``{"do": "migrate", "dsn": DSN}`` installs the tree's schema; ``{"do": "enqueue", "dsn": DSN,
"type": T, "n": N, "steps": S, "keys": K, "limits": {...} | null}`` submits N workflows of S steps
with the tree's ``submit_many`` (1,000 per statement, one transaction, as ``wfctl submit
--input-file`` does), spread round robin over K concurrency keys when K > 0, then sets the
operator's limits with the tree's ``wfctl.limits.set_limits`` (what ``wfctl limit`` runs).

It imports only ``wfctl``, found through PYTHONPATH: the benchmark compares two trees (the code
before the limits commit and the current one), and each tree's schema, submits and limits must
come from that tree's own code. One process per tree serves the whole run (starting Python and
importing wfctl for every phase would cost more than the chore).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import psycopg

BATCH = 1000  # inputs per submit_many statement


def migrate(dsn: str) -> None:
    from wfctl import schema

    with psycopg.connect(dsn) as conn:
        schema.migrate(conn)


def enqueue(job: dict[str, Any]) -> None:
    from wfctl.client import submit_many

    one = json.dumps({"steps": job["steps"]})
    keys = int(job["keys"])
    with psycopg.connect(job["dsn"]) as conn:
        if keys:
            # key k takes the inputs k, k + K, k + 2K, ...
            for k in range(keys):
                count = len(range(k, job["n"], keys))
                for start in range(0, count, BATCH):
                    size = min(BATCH, count - start)
                    submit_many(conn, job["type"], [one] * size, concurrency_key=f"key-{k:02d}")
        else:
            for start in range(0, job["n"], BATCH):
                submit_many(conn, job["type"], [one] * min(BATCH, job["n"] - start))
        wanted = job.get("limits")
        if wanted:
            from wfctl import limits

            limits.set_limits(
                conn,
                job["type"],
                concurrency=wanted.get("concurrency"),
                key_concurrency=wanted.get("key_concurrency"),
                rate=limits.parse_rate(wanted["rate"]) if wanted.get("rate") else None,
            )


def main() -> int:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["do"] == "migrate":
                migrate(command["dsn"])
            elif command["do"] == "enqueue":
                enqueue(command)
            else:
                raise ValueError(f"unknown command {command['do']!r}")
        except Exception as exc:  # reported to the benchmark, which stops
            print("error: " + " ".join(f"{type(exc).__name__}: {exc}".split()), flush=True)
        else:
            print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
