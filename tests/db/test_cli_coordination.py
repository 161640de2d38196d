"""`wfctl send`, `wfctl event` and `wfctl wait` through the in-process CLI, and the library call
beneath `wfctl send`, which says whether a keyed send stored a message. The same commands as a
shell runs them, against a real worker running tests/apps/coordflows.py:
tests/process/test_cli_coordination_workers.py."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from helpers import rows, wait_for
from support.cli_coordination import one

import wfctl
from wfctl.coordination import send_json


def test_send_json_output_and_a_payload_kept_as_written(cli, dsn):
    wid = cli("submit", "approval", "--dsn", dsn).stdout.strip()
    payload = '{"amount": 0.12345678901234567890123, "note": "\\u00e9"}'
    result = cli("send", wid, "approval", payload, "--json", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    sent = json.loads(result.stdout)
    assert sent == {"id": sent["id"], "workflow_id": wid, "topic": "approval", "created": True}
    stored = rows(
        dsn, "SELECT payload::text, idempotency_key FROM workflow_messages WHERE id = %s", sent["id"]
    )
    assert stored == [('{"note": "é", "amount": 0.12345678901234567890123}', None)]
    # no payload: the message carries none (SQL NULL; ctx.recv returns None)
    bare = cli("send", wid, "other", "--dsn", dsn)
    assert bare.exit_code == 0, bare.output
    assert rows(dsn, "SELECT payload FROM workflow_messages WHERE topic = 'other'") == [(None,)]


def test_wait_prints_the_output_with_every_stored_digit(cli, dsn):
    """An output stored by SQL (any language may finish a workflow's work) is printed as stored."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wid = conn.execute(
            "INSERT INTO workflows (workflow_type, status, output_data, finished_at)"
            " VALUES ('quick', 'completed', '{\"x\": 1.10, \"big\": 12345678901234567890123}', now())"
            " RETURNING id"
        ).fetchone()[0]
    result = cli("wait", str(wid), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.stdout == '{\n  "x": 1.10,\n  "big": 12345678901234567890123\n}\n'
    as_json = cli("--json", "wait", str(wid), "--dsn", dsn)
    assert json.loads(as_json.stdout) == {
        "id": str(wid),
        "status": "completed",
        "output": {"x": pytest.approx(1.1), "big": 12345678901234567890123},
    }


def test_submit_timeout_sets_the_deadline_and_its_message(cli, dsn):
    result = cli("submit", "approval", "{}", "--timeout", " 90m ", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    row = rows(
        dsn,
        "SELECT extract(epoch FROM deadline_at - now()), deadline_error FROM workflows WHERE id = %s",
        result.stdout.strip(),
    )[0]
    assert 90 * 60 - 60 < float(row[0]) <= 90 * 60 and row[1] == "timed out after 90m"
    plain = cli("submit", "approval", "{}", "--dsn", dsn)
    assert rows(dsn, "SELECT deadline_at FROM workflows WHERE id = %s", plain.stdout.strip()) == [(None,)]


def test_send_json_says_whether_a_keyed_send_stored_a_message(dsn):
    wid = str(wfctl.submit(dsn, "approval", {}))
    assert send_json(dsn, wid, "t", '{"n": 1}', key="a").created
    assert not send_json(dsn, wid, "t", '{"n": 2}', key="a").created
    assert send_json(dsn, wid, "t", None).created
    # in the caller's transaction (an outbox): the second send of a key in it stores nothing ...
    with psycopg.connect(dsn) as conn:
        first = send_json(conn, wid, "t", "1", key="b")
        second = send_json(conn, wid, "t", "2", key="b")
        assert (first.created, second.created, second.id) == (True, False, first.id)
        conn.rollback()
    # ... and a rollback takes the message back
    assert rows(dsn, "SELECT idempotency_key, payload FROM workflow_messages ORDER BY id") == [
        ("a", {"n": 1}),
        (None, None),
    ]


def test_a_keyed_send_that_loses_the_race_for_its_key_says_so(dsn):
    """Two sends of one key at once: the second finds no message with the key, then wfctl_send's
    insert waits for the first one's commit and returns that message; the second reports it was
    not stored by this call."""
    wid = str(wfctl.submit(dsn, "approval", {}))
    holder = psycopg.connect(dsn)
    try:
        first = send_json(holder, wid, "t", '"first"', key="race")  # uncommitted
        outcome: list[object] = []
        thread = threading.Thread(
            target=lambda: outcome.append(send_json(dsn, wid, "t", '"second"', key="race"))
        )
        thread.start()
        wait_for(
            lambda: one(
                dsn,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                "%wfctl_send%",
            ),
            what="the second send to wait for the first one's key",
        )
        holder.commit()
        thread.join(timeout=30)
    finally:
        holder.close()
    assert first.created and len(outcome) == 1
    second = outcome[0]
    assert (second.id, second.created) == (first.id, False)  # type: ignore[attr-defined]
    assert rows(dsn, "SELECT payload FROM workflow_messages") == [("first",)]
