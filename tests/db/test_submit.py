"""`wfctl submit`, `wfctl.submit` and the SQL function: ids, idempotency, bad input."""

from __future__ import annotations

import json
import threading
import uuid

import psycopg
import pytest

import wfctl
from wfctl.client import Submitted, submit_one
from wfctl.validate import MAX_INPUT_BYTES


def count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM workflows").fetchone()[0]


def test_submit_prints_only_the_id(cli, dsn):
    result = cli("submit", "order", '{"amount": 12}', "--dsn", dsn)
    assert result.exit_code == 0, result.output
    wid = result.stdout.strip()
    assert result.stdout == wid + "\n" and uuid.UUID(wid)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT workflow_type, input_data, status, priority, max_retries FROM workflows WHERE id = %s",
            (wid,),
        ).fetchone()
    assert row == ("order", {"amount": 12}, "pending", 0, None)


def test_same_key_twice_is_one_workflow(cli, dsn):
    first = cli("submit", "order", "{}", "--key", "order-42", "--dsn", dsn)
    second = cli("submit", "order", '{"other": 1}', "--key", "order-42", "--dsn", dsn)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout
    assert "used before" in second.stderr and first.stderr == ""
    assert count(dsn) == 1


def test_priority_and_max_retries_are_stored(cli, dsn):
    result = cli("submit", "order", "--priority", "7", "--max-retries", "0", "--dsn", dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT priority, max_retries, input_data FROM workflows WHERE id = %s", (result.stdout.strip(),)
        ).fetchone() == (7, 0, None)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["order", "{bad"], "malformed JSON input"),
        (["order", "{}", "--delay", "10"], "invalid --delay '10'"),
        (["order", "{}", "--delay", "-5m"], "invalid --delay '-5m'"),
        (["order", "{}", "--delay", "soon"], "invalid --delay 'soon'"),
        (["order", "{}", "--max-retries", "-1"], "cannot be negative"),
        (["order", "{}", "--input-file", "x.jsonl"], "either as JSON or with --input-file"),
        (["", "{}"], "1 to 100 characters"),
        (["x" * 101, "{}"], "1 to 100 characters"),
    ],
)
def test_bad_submit_input_is_one_line_and_stores_nothing(cli, dsn, args, fragment):
    result = cli("submit", *args, "--dsn", dsn)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == "" and count(dsn) == 0


def test_oversized_input(cli, dsn):
    big = json.dumps({"blob": "x" * (MAX_INPUT_BYTES + 1)})
    result = cli("submit", "order", big, "--dsn", dsn)
    assert result.exit_code == 2 and "over the limit" in result.stderr and count(dsn) == 0


def test_input_file_in_one_transaction(cli, dsn, clean_env):
    path = clean_env / "in.jsonl"
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(2500)) + "\n")
    result = cli("submit", "order", "--input-file", str(path), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.split()) == 2500 and count(dsn) == 2500
    assert "submitted 2500" in result.stderr


def test_input_file_from_stdin(cli, dsn):
    result = cli("submit", "order", "--input-file", "-", "--dsn", dsn, "--json", input='{"a":1}\n{"a":2}\n')
    assert result.exit_code == 0 and json.loads(result.stdout)["count"] == 2


def test_bad_line_names_its_number_and_stores_nothing(cli, dsn, clean_env):
    path = clean_env / "in.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}\n{"n": oops}\n{"n": 4}\n')
    result = cli("submit", "order", "--input-file", str(path), "--dsn", dsn)
    assert result.exit_code == 2 and "line 3" in result.stderr and "nothing was submitted" in result.stderr
    assert count(dsn) == 0


def test_non_utf8_file(cli, dsn, clean_env):
    path = clean_env / "in.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": "\xff"}\n')
    result = cli("submit", "order", "--input-file", str(path), "--dsn", dsn)
    assert result.exit_code == 2 and "not valid UTF-8 (line 2" in result.stderr and count(dsn) == 0


def test_missing_input_file(cli, dsn, clean_env):
    result = cli("submit", "order", "--input-file", str(clean_env / "nope.jsonl"), "--dsn", dsn)
    assert result.exit_code == 2 and "cannot read --input-file" in result.stderr


def test_unknown_type_is_accepted_with_a_warning_and_strict_refuses_it(cli, dsn, clean_env):
    """Submitting before the worker that runs a type has started is normal: the workflow waits.
    Once workers have registered types, one none of them knows (a typo?) is stored with a
    one-line warning naming the known types; --strict refuses it and stores nothing."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types)"
            " VALUES ('w', 'h', 1, 8, '{order,refund}')"
        )
    result = cli("submit", "ordr", "{}", "--dsn", dsn)
    assert result.exit_code == 0 and uuid.UUID(result.stdout.strip())
    assert result.stderr == (
        "wfctl: warning: no worker has registered workflow type 'ordr' (known: order, refund): "
        "it stays pending until a worker that runs it starts\n"
    )
    assert count(dsn) == 1
    known = cli("submit", "order", "{}", "--dsn", dsn)
    assert known.exit_code == 0 and known.stderr == ""
    silent = cli("submit", "ordr", "{}", "--force", "--dsn", dsn)  # --force: kept, says nothing
    assert silent.exit_code == 0 and silent.stderr == "" and count(dsn) == 3

    strict = cli("submit", "ordr", "{}", "--strict", "--dsn", dsn)
    assert strict.exit_code == 2 and strict.stdout == ""
    assert strict.stderr == (
        "wfctl: error: unknown workflow type 'ordr': no worker has registered it "
        "(known: order, refund); --strict refuses it\n"
    )
    path = clean_env / "in.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}\n')
    lines = cli("submit", "ordr", "--input-file", str(path), "--strict", "--dsn", dsn)
    assert lines.exit_code == 2 and "--strict refuses it" in lines.stderr and count(dsn) == 3
    batch = cli("submit", "ordr", "--input-file", str(path), "--dsn", dsn)
    assert batch.exit_code == 0 and len(batch.stdout.split()) == 2 and count(dsn) == 5
    assert "warning: no worker has registered workflow type 'ordr'" in batch.stderr
    assert cli("submit", "order", "{}", "--strict", "--dsn", dsn).exit_code == 0

    both = cli("submit", "order", "{}", "--strict", "--force", "--dsn", dsn)
    assert both.exit_code == 2 and both.stderr == (
        "wfctl: error: --strict and --force contradict each other: give one\n"
    )
    assert count(dsn) == 6


def test_before_any_worker_submit_says_nothing_and_strict_refuses(cli, dsn):
    result = cli("submit", "order", "{}", "--dsn", dsn)
    assert result.exit_code == 0 and result.stderr == "" and count(dsn) == 1
    strict = cli("submit", "order", "{}", "--strict", "--dsn", dsn)
    assert strict.exit_code == 2 and count(dsn) == 1
    assert strict.stderr == (
        "wfctl: error: unknown workflow type 'order': no worker has registered it "
        "(no worker has registered any type yet); --strict refuses it\n"
    )


def test_type_with_quotes_and_sql_is_stored_literally(cli, dsn):
    nasty = "x'); DROP TABLE workflows; --\"\\"
    result = cli("submit", nasty, '{"q": "\'"}', "--dsn", dsn)
    assert result.exit_code == 0, result.output
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT workflow_type, input_data FROM workflows").fetchall() == [
            (nasty, {"q": "'"})
        ]


def test_missing_schema_says_run_init(cli, empty_dsn):
    result = cli("submit", "order", "{}", "--dsn", empty_dsn)
    assert result.exit_code == 5
    assert (
        result.stderr == "wfctl: error: this database has no wfctl schema (run `wfctl init` to install it)\n"
    )


def test_a_schema_contracted_past_this_release_says_upgrade_wfctl(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (99, 'future')")
        assert cli("recover", "--dsn", dsn).exit_code == 0  # a newer schema that still runs it
        conn.execute("INSERT INTO wfctl_schema_migrations (version, name) VALUES (-99, 'future')")
    result = cli("recover", "--dsn", dsn)
    assert result.exit_code == 5 and "is too old for the database" in result.stderr
    assert "upgrade wfctl on this machine" in result.stderr


def test_python_api_and_sql_function(dsn):
    first = wfctl.submit(dsn, "order", {"a": 1}, key="k", priority=3, delay="1m")
    again = wfctl.submit(dsn, "order", {"a": 2}, key="k")
    assert first == again
    with psycopg.connect(dsn, autocommit=True) as conn:
        sql_id = conn.execute("SELECT wfctl_submit('order', '{\"b\": 2}'::jsonb, 'k')").fetchone()[0]
        other = conn.execute("SELECT wfctl_submit('refund')").fetchone()[0]
        assert sql_id == first and other != first
        assert conn.execute("SELECT count(*) FROM workflows").fetchone()[0] == 2
        # inside the application's own transaction: enqueued atomically with its writes
        with conn.transaction():
            inner = wfctl.submit(conn, "order", {"c": 3})
            conn.execute("SELECT 1")
        assert conn.execute("SELECT count(*) FROM workflows WHERE id = %s", (inner,)).fetchone()[0] == 1


def test_python_api_rejects_bad_input(dsn):
    with pytest.raises(wfctl.errors.InvalidInput, match="cannot be stored: Object of type set"):
        wfctl.submit(dsn, "order", {"s": {1}})
    assert count(dsn) == 0


def race_submits(conns: list[psycopg.Connection], key: str) -> list[Submitted]:
    """Submit ``key`` on every connection at once (one thread each, released together)."""
    barrier = threading.Barrier(len(conns))
    results: list[Submitted] = []
    errors: list[BaseException] = []

    def submit(conn: psycopg.Connection) -> None:
        try:
            barrier.wait()
            results.append(submit_one(conn, "order", "{}", key=key))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def test_same_key_at_the_same_moment_is_created_once(dsn):
    """Of several submits of one key racing each other, exactly one reports that it created the
    workflow; all get its id."""
    rounds = 15
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(8)]
    try:
        for round_number in range(rounds):
            results = race_submits(conns, f"race-{round_number}")
            assert len(results) == len(conns) and len({r.id for r in results}) == 1
            created = [r for r in results if r.created]
            assert len(created) == 1, f"round {round_number}: {len(created)} submits reported 'created'"
    finally:
        for c in conns:
            c.close()
    assert count(dsn) == rounds


def test_second_submit_in_the_same_transaction_is_not_created(dsn):
    with psycopg.connect(dsn) as conn, conn.transaction():
        first = submit_one(conn, "order", "{}", key="tx-key")
        second = submit_one(conn, "order", '{"other": 1}', key="tx-key")
    assert first.created and not second.created and first.id == second.id
    assert count(dsn) == 1
