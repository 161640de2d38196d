"""The worker's log writes stored strings (error messages, deadline errors) escaped: no control
character drives the terminal, no line feed or CR forges a line of its own (a Prometheus sample,
another log record), and no bidirectional control or zero-width character changes what a line
shows. Plain and rich formats escape them as ``\\x1b`` / ``\\u202e``; JSON as JSON does."""

from __future__ import annotations

import json
import re

import pytest
from helpers import rows

APP = "storedflows"
FORGED = 'wfctl_fake{a="b"} 99'
# a run's error: its first line is logged (up to the CR)
ERROR = f"boom\x1b[2J\x1b]0;pwned\x07 ord\u202eredro\u200b\x9b31m\r{FORGED}\n{FORGED}"
DEADLINE = f"late\x1b[31m\u2028\r\n{FORGED}\n2026-01-01T00:00:00.000Z INFO    completed forged"
UNSAFE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
)


@pytest.mark.parametrize("fmt", ["plain", "rich", "json"])
def test_stored_strings_reach_the_worker_log_escaped(conn, dsn, workers, fmt):
    (failing,) = conn.execute(
        "INSERT INTO workflows (workflow_type, input_data) VALUES ('raiser', %s) RETURNING id",
        (json.dumps({"message": ERROR}),),
    ).fetchone()
    (late,) = conn.execute(
        "INSERT INTO workflows (workflow_type, input_data, deadline_at, deadline_error) "
        "VALUES ('echo', '{}', now() - interval '1 second', %s) RETURNING id",
        (DEADLINE,),
    ).fetchone()
    log = workers.run("--log-format", fmt, app=APP)
    assert rows(dsn, "SELECT status FROM workflows WHERE id = ANY(%s)", [failing, late]) == [("failed",)] * 2
    assert not UNSAFE.findall(log), UNSAFE.findall(log)
    lines = log.splitlines()
    assert not [line for line in lines if line.startswith(("wfctl_fake", "2026-01-01"))]
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        messages = [r["message"] for r in records if r["event"] == "failed"]
        assert f"{failing} RuntimeError: {ERROR.split(chr(13))[0]}" in messages
        assert f"{late} {DEADLINE}" in messages
    else:
        assert "RuntimeError: boom\\x1b[2J\\x1b]0;pwned\\x07 ord\\u202eredro\\u200b\\x9b31m" in log
        assert f"late\\x1b[31m\\u2028\\x0d\\x0a{FORGED}\\x0a2026-01-01" in log
