"""`wfctl init`, `wfctl db`, and the one-line errors every command gives.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_init.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg

from wfctl import schema


def test_concurrent_init_processes(empty_dsn, clean_env):
    env = {**os.environ, "WFCTL_DSN": empty_dsn}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "wfctl", "init"],
            env=env,
            cwd=clean_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    installed = [err for _out, err in outputs if "installed schema" in err]
    up_to_date = [err for _out, err in outputs if "up to date" in err]
    assert len(installed) == 1 and len(up_to_date) == 2, outputs
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations WHERE version > 0").fetchone()[
            0
        ] == len(schema.migrations())
