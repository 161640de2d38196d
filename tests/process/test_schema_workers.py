"""The schema: a superset of the reference design, installed by migrations, version-checked.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_schema.py.
"""

from __future__ import annotations

import re

import psycopg
from helpers import wait_for


def test_plain_insert_runs_under_the_types_retry_policy(workers, dsn, cli):
    """A workflow submitted by a plain INSERT of the reference columns gets the retry policy its
    type was registered with ('doomed': max_retries=1), not a column default."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wid = str(
            conn.execute(
                "INSERT INTO workflows (workflow_type, input_data) VALUES ('doomed', '{}') RETURNING id"
            ).fetchone()[0]
        )
    pending = cli("show", wid, "--dsn", dsn)
    assert pending.exit_code == 0, pending.output
    # no "of N" before a worker claims it: the type's policy is not known yet
    assert re.search(r"^ attempt +1 *$", pending.stdout, re.MULTILINE), pending.stdout

    def finished() -> tuple | None:
        workers.run()
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT status, attempt, max_retries FROM workflows WHERE id = %s", (wid,)
            ).fetchone()
        return row if row[0] in ("completed", "failed", "cancelled") else None

    assert wait_for(finished, timeout=60, what=f"{wid} to finish") == ("failed", 2, 1)
    assert [step for w, step in workers.effects() if w == wid] == ["only", "only"]
    shown = cli("show", wid, "--dsn", dsn)
    assert re.search(r"^ attempt +2 of 2 *$", shown.stdout, re.MULTILINE), shown.stdout
