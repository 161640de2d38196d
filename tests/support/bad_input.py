"""The bad-input catalogue (one row per way to hand wfctl something wrong) and how a row is set
up, run and checked; tests/db/test_bad_input.py runs the rows that run in-process,
tests/process/test_bad_input_processes.py those that need a real process."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from helpers import Result, Server, free_port, with_db
from psycopg import sql

from wfctl.validate import MAX_INPUT_BYTES

LIVE_WORKER = "host-a:4242:abcdef"
PASSWORD = "Sw0rdfish-Secret"  # the password of every DSN that carries one below
NASTY = "x'); DROP TABLE workflows; --\"\\ ' OR '1'='1"


# -- the database before and after ------------------------------------------------------------


def fingerprint(dsn: str) -> dict[str, object]:
    """Every relation, function and row of the database, in a comparable form."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
            " ORDER BY 1, 2"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'public' ORDER BY 1"
        ).fetchall()
        tables = {}
        for schema, name, kind in relations:
            if kind in ("r", "p"):
                ident = sql.Identifier(schema, name)
                tables[name] = conn.execute(
                    sql.SQL(
                        "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
                        " FROM {} t"
                    ).format(ident)
                ).fetchone()
    return {"relations": relations, "functions": functions, "tables": tables}


def seed(dsn: str) -> dict[str, str]:
    """A live worker that registered 'three', and one workflow in each state."""
    ids: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types)"
            " VALUES (%s, 'host-a', 4242, 8, '{three}')",
            (LIVE_WORKER,),
        )
        for status in ("pending", "running", "completed", "failed", "cancelled"):
            finished = status in ("completed", "failed", "cancelled")
            ids[status] = str(
                conn.execute(
                    "INSERT INTO workflows (workflow_type, status, input_data, lease_owner, lease_epoch,"
                    " current_step, output_data, error_message, started_at, finished_at)"
                    " VALUES ('three', %s, '{\"n\": 1}', %s, 2, %s, %s, %s,"
                    " CASE WHEN %s <> 'pending' THEN now() END, CASE WHEN %s THEN now() END) RETURNING id",
                    (
                        status,
                        LIVE_WORKER if status != "pending" else None,
                        3 if status == "completed" else (1 if status != "pending" else 0),
                        json.dumps({"sum": 6}) if status == "completed" else None,
                        "boom" if status == "failed" else None,
                        status,
                        finished,
                    ),
                ).fetchone()[0]
            )
        for status in ("running", "completed", "failed"):
            steps = 3 if status == "completed" else 1
            conn.execute(
                "INSERT INTO workflow_steps (workflow_id, step_number, step_name, status, output_data,"
                " started_at, completed_at, attempt, lease_epoch, workflow_created_at)"
                " SELECT w.id, n, (ARRAY['one', 'two', 'three'])[n], 'completed', to_jsonb(n),"
                " now(), now(), 1, 2, w.created_at FROM workflows w, generate_series(1, %s) n"
                " WHERE w.id = %s",
                (steps, ids[status]),
            )
    return ids


# -- the rows ---------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a row's setup and check see."""

    dsn: str  # the database the row runs against (the seeded one, or one without the schema)
    project: Path  # the working directory (clean_env)
    ids: dict[str, str] = field(default_factory=dict)
    subs: dict[str, str] = field(default_factory=dict)


Setup = Callable[[Ctx], None]
Check = Callable[[Ctx, dict[str, object], dict[str, object]], None]


def unchanged(_ctx: Ctx, before: dict[str, object], after: dict[str, object]) -> None:
    assert after == before, "the command changed the database"


def stored_literally(workflow_type: str, key: str | None = None) -> Check:
    def check(ctx: Ctx, before: dict[str, object], after: dict[str, object]) -> None:
        with psycopg.connect(ctx.dsn) as conn:
            new = conn.execute(
                "SELECT workflow_type, idempotency_key, input_data FROM workflows"
                " WHERE NOT (id = ANY(%s::uuid[]))",
                (list(ctx.ids.values()),),
            ).fetchall()
            assert conn.execute("SELECT count(*) FROM workflows").fetchone()[0] == len(ctx.ids) + 1
        assert new == [(workflow_type, key, {"q": "'; DROP TABLE workflow_steps; --"})]
        assert after["relations"] == before["relations"] and after["functions"] == before["functions"]
        for table in ("workflow_steps", "workers", "wfctl_schema_migrations"):
            assert after["tables"][table] == before["tables"][table], table  # type: ignore[index]

    return check


def stored_one(ctx: Ctx, before: dict[str, object], after: dict[str, object]) -> None:
    counts = after["tables"]["workflows"][0], before["tables"]["workflows"][0]  # type: ignore[index]
    assert counts[0] == counts[1] + 1


def stored_inputs(*expected: object) -> Check:
    """Exactly these inputs were stored, and nothing else changed."""

    def check(ctx: Ctx, before: dict[str, object], after: dict[str, object]) -> None:
        with psycopg.connect(ctx.dsn) as conn:
            new = conn.execute(
                "SELECT input_data FROM workflows WHERE NOT (id = ANY(%s::uuid[])) ORDER BY created_at, id",
                (list(ctx.ids.values()),),
            ).fetchall()
        assert sorted(json.dumps(r[0]) for r in new) == sorted(json.dumps(e) for e in expected)
        for table in ("workflow_steps", "workers", "wfctl_schema_migrations"):
            assert after["tables"][table] == before["tables"][table], table  # type: ignore[index]

    return check


def no_embedded_server(ctx: Ctx, before: dict[str, object], after: dict[str, object]) -> None:
    """Unchanged, and no embedded server was started (nothing fell back to it)."""
    unchanged(ctx, before, after)
    assert not (ctx.project / ".wfctl").exists(), "the embedded server was started"


@dataclass
class Row:
    name: str
    args: tuple[str, ...]
    fragment: str
    code: int
    db: str = "schema"  # "schema": migrated and seeded; "empty": no wfctl schema
    setup: Setup | None = None
    process: bool = False  # a real `python -m wfctl` process (for `wfctl worker`)
    cwd: str = "project"  # for processes: "project" or "apps" (tests/apps, for --app testflows)
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # none of these may appear in the output
    check: Check = unchanged


def write(name: str, content: str | bytes) -> Setup:
    def setup(ctx: Ctx) -> None:
        path = ctx.project / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    return setup


def make_dir(name: str) -> Setup:
    return lambda ctx: (ctx.project / name).mkdir()


def symlink(name: str, target: str) -> Setup:
    return lambda ctx: (ctx.project / name).symlink_to(target)


def deep_workflow(ctx: Ctx) -> None:
    """A workflow stored by SQL with an input nested 5,000 deep and an output holding an integer
    of 5,000 digits: more than Python's json reads; `show` must still draw it."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        wid = conn.execute(
            "INSERT INTO workflows (workflow_type, input_data, output_data)"
            " VALUES ('three', %s::jsonb, %s::jsonb) RETURNING id",
            ("[" * 5000 + "]" * 5000, '{"n": ' + "7" * 5000 + "}"),
        ).fetchone()[0]
    ctx.ids["deep"] = str(wid)
    ctx.subs["<deep>"] = str(wid)


def newer_schema(ctx: Ctx) -> None:
    """A newer release's schema whose contract removed what this release needs."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wfctl_schema_migrations (version, name) VALUES (99, 'future'), (-99, 'future')"
        )


def unreachable() -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=3"


def partitioned(ctx: Ctx) -> None:
    """The seeded database in the partitioned layout, every 1 day (converted, its live worker
    stopped, unless the run's databases are in that layout already)."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        conn.execute("UPDATE workers SET stopped_at = now()")
        if conn.execute("SELECT wfctl_partition_interval()").fetchone() == (None,):
            with conn.transaction():
                conn.execute("SELECT wfctl_partition_convert(interval '1 day')")


D = ("--dsn", "<dsn>")
BIG = json.dumps({"blob": "x" * MAX_INPUT_BYTES})
EXACT = json.dumps("x" * (MAX_INPUT_BYTES - 2))  # exactly MAX_INPUT_BYTES bytes of JSON
assert len(EXACT.encode()) == MAX_INPUT_BYTES
NO_SCHEMA = "this database has no wfctl schema (run `wfctl init` to install it)"
NOT_UUID = "not a UUID"
BAD_DURATION = "use a number and a unit, such as 30s, 5m, 24h or 7d"
NON_ASCII = json.dumps("é" * 300_000, ensure_ascii=False)  # 600,002 bytes; escaped it was 1.8 MB
NON_ASCII_OVER = json.dumps("é" * (MAX_INPUT_BYTES // 2), ensure_ascii=False)  # 1,000,002 bytes
DEEP_1000 = "[" * 1000 + "]" * 1000
DEEP_501 = "[" * 501 + "]" * 501
DEEP_500 = "[" * 500 + "]" * 500
LONG_INT = "1" * 4301
BOM = b"\xef\xbb\xbf"
# line separators of str.splitlines() inside JSON strings: text, not line ends
SEPARATORS = {"s": "a\u2028b\u2029c\u0085d"}
HUGE = "99999999999d"  # more days than a timedelta holds
MAX_TIMEDELTA = "999999999d"  # the largest timedelta: past PostgreSQL's timestamps when added to now()


def duration_rows() -> list[Row]:
    rows: list[Row] = []
    options = [
        ("submit", ("submit", "three", "{}"), "--delay", "invalid --delay"),
        ("recover", ("recover",), "--stale", "invalid --stale"),
        ("stats", ("stats",), "--since", "invalid --since"),
        ("list", ("list",), "--since", "invalid --since"),
        ("prune", ("prune",), "--older-than", "invalid --older-than"),
        ("workers", ("workers",), "--stale", "invalid --stale"),
        ("metrics", ("metrics",), "--since", "invalid --since"),
        ("metrics", ("metrics",), "--stale", "invalid --stale"),
        ("submit", ("submit", "three", "{}"), "--timeout", "invalid --timeout"),
        ("wait", ("wait", "<pending>"), "--timeout", "invalid --timeout"),
        ("event", ("event", "<pending>", "stage"), "--wait", "invalid --wait"),
    ]
    for command, args, option, fragment in options:
        extra = ("--older-than", "30d") if command == "prune" and option != "--older-than" else ()
        for label, value in (
            ("unitless", "10"),
            ("negative", "-5m"),
            ("word", "soon"),
            ("huge", HUGE),
            ("max", MAX_TIMEDELTA),
            ("tiny", "0.0000001s"),  # below the minimum of 1ms (1s for --stale)
        ):
            rows.append(
                Row(f"{command}-{option[2:]}-{label}", (*args, *extra, option, value, *D), fragment, 2)
            )
    for option in ("--heartbeat", "--grace", "--poll"):
        for label, value in (("unitless", "10"), ("negative", "-1s"), ("huge", HUGE), ("tiny", "0.0001s")):
            rows.append(
                Row(
                    f"worker-{option[2:]}-{label}",
                    ("worker", "--app", "testflows", "--burst", option, value, *D),
                    f"invalid {option}",
                    2,
                    process=True,
                    cwd="apps",
                )
            )
    for command, args in (("recover", ("recover",)), ("stats", ("stats",)), ("workers", ("workers",))):
        rows.append(
            Row(f"{command}-stale-under-a-second", (*args, "--stale", "999ms", *D), "minimum of 1s", 2)
        )
    rows.append(
        Row("submit-delay-under-1ms", ("submit", "three", "{}", "--delay", "0.5ms", *D), "minimum of 1ms", 2)
    )
    for command, args, option in (
        ("recover", ("recover",), "--stale"),
        ("prune", ("prune",), "--older-than"),
        ("worker", ("worker", "--app", "testflows", "--burst"), "--heartbeat"),
    ):
        rows.append(
            Row(
                f"{command}-{option[2:]}-zero",
                (*args, option, "0s", *D),
                "must be greater than zero",
                2,
                process=command == "worker",
                cwd="apps",
            )
        )
    return rows


def no_schema_rows() -> list[Row]:
    wid = "6d0f1c2e-8d7f-4a43-9a1e-9f3c2b0f3a11"
    commands = [
        ("submit", "three", "{}"),
        ("recover", "--stale", "5m"),
        ("stats",),
        ("list",),
        ("show", wid),
        ("cancel", wid),
        ("retry", wid),
        ("prune", "--older-than", "30d"),
        ("workers",),
        ("metrics",),
        ("send", wid, "approval", "{}"),
        ("event", wid, "stage"),
        ("wait", wid),
    ]
    rows = [Row(f"no-schema-{c[0]}", (*c, *D), NO_SCHEMA, 5, db="empty") for c in commands]
    rows.append(
        Row(
            "no-schema-worker",
            ("worker", "--app", "testflows", "--burst", *D),
            NO_SCHEMA,
            5,
            db="empty",
            process=True,
            cwd="apps",
        )
    )
    rows.append(
        Row(
            "no-schema-submit-file",
            ("submit", "three", "--input-file", "-", *D),
            NO_SCHEMA,
            5,
            db="empty",
            stdin='{"n": 1}\n',
        )
    )
    return rows


def coordination_rows() -> list[Row]:
    """`wfctl send`, `event`, `wait` and `submit --timeout`: refused before anything is stored (a
    send to an unknown or finished workflow stores no message; a wait marks nothing awaited)."""
    send = ("send", "<pending>", "approval")
    rows = [
        Row("send-id-unknown", ("send", "<missing>", "approval", "{}", *D), "no workflow", 6),
        *[
            Row(
                f"send-to-{s}",
                ("send", f"<{s}>", "approval", "{}", *D),
                f"is {s}: it takes no more messages",
                7,
            )
            for s in ("completed", "failed", "cancelled")
        ],
        Row("send-json-malformed", (*send, "{bad", *D), "malformed JSON payload", 2),
        Row("send-json-nan", (*send, '{"a": NaN}', *D), "message payload cannot be stored", 2),
        Row("send-json-over-limit", (*send, BIG, *D), f"over the limit of {MAX_INPUT_BYTES} bytes", 2),
        Row("send-topic-151", ("send", "<pending>", "t" * 151, "{}", *D), "1 to 150 characters", 2),
        Row("send-topic-empty", ("send", "<pending>", "", "{}", *D), "1 to 150 characters", 2),
        Row("send-key-201", (*send, "{}", "--key", "k" * 201, *D), "1 to 200 characters", 2),
        Row(
            "send-key-not-utf8",
            (*send, "{}", "--key", "k\udcff", *D),
            "idempotency key is not valid UTF-8",
            2,
        ),
        Row("send-id-is-sql", ("send", "'; DELETE FROM workflows; --", "approval", *D), NOT_UUID, 2),
        Row("event-key-151", ("event", "<pending>", "k" * 151, *D), "1 to 150 characters", 2),
        Row("event-id-unknown", ("event", "<missing>", "stage", *D), "no workflow", 6),
        Row("event-id-unknown-wait", ("event", "<missing>", "stage", "--wait", "5s", *D), "no workflow", 6),
        Row("event-not-set", ("event", "<pending>", "stage", *D), "has not set event 'stage'", 6),
        Row(
            "event-finished-never-set",
            ("event", "<completed>", "stage", "--wait", "30s", *D),
            "is completed and never set event 'stage'",
            6,
        ),
        Row("wait-id-unknown", ("wait", "<missing>", *D), "no workflow", 6),
        Row("wait-id-unknown-timeout", ("wait", "<missing>", "--timeout", "5s", *D), "no workflow", 6),
        Row("wait-timeout-minus-1s", ("wait", "<pending>", "--timeout", "-1s", *D), "invalid --timeout", 2),
        Row("event-wait-minus-5s", ("event", "<pending>", "stage", "--wait", "-5s", *D), "invalid --wait", 2),
        Row(
            "submit-timeout-zero",
            ("submit", "three", "{}", "--timeout", "0s", *D),
            "must be greater than zero",
            2,
        ),
        Row(
            "submit-timeout-minus-1m",
            ("submit", "three", "{}", "--timeout", "-1m", *D),
            "invalid --timeout",
            2,
        ),
        Row(
            "submit-file-timeout-zero",
            ("submit", "three", "--input-file", "-", "--timeout", "0s", *D),
            "must be greater than zero",
            2,
            stdin='{"n": 1}\n',
        ),
    ]
    rows += [Row(f"{c}-id-not-uuid", (c, "12345", *a, *D), NOT_UUID, 2) for c, a in COORDINATION_ARGS]
    rows += [
        Row(
            f"db-unreachable-{c}",
            (c, str(uuid.UUID(int=1)), *a, "--dsn", "<unreachable>"),
            "cannot connect",
            4,
        )
        for c, a in COORDINATION_ARGS
    ]
    return rows


COORDINATION_ARGS = (("send", ("approval", "{}")), ("event", ("stage",)), ("wait", ()))


def code_schedule(ctx: Ctx) -> None:
    """A schedule the code of type 'three' declares (a worker wrote it at its start)."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_schedules (name, workflow_type, cron, source, next_tick_at)"
            " VALUES ('three', 'three', '0 3 * * *', 'code', now() + interval '1 hour')"
        )


def business_key_rows() -> list[Row]:
    """A run named by its idempotency key (`--key`, `send --to-key`): exactly one of the ID and
    the key, a key no run has (NotFound, as an unknown id), a key that is not text PostgreSQL
    compares; nothing is done to any run."""
    rows: list[Row] = []
    for command in ("show", "wait", "cancel", "retry"):
        rows += [
            Row(
                f"{command}-id-and-key",
                (command, "<pending>", "--key", "order-1", *D),
                "name the workflow by its ID or by --key, not both",
                2,
            ),
            Row(
                f"{command}-neither-id-nor-key", (command, *D), "name the workflow by its ID or by --key\n", 2
            ),
            Row(
                f"{command}-key-unknown",
                (command, "--key", "no-such-order", *D),
                "no workflow with idempotency key 'no-such-order'",
                6,
            ),
            Row(
                f"{command}-key-not-utf8",
                (command, "--key", "k\udcff", *D),
                "idempotency key is not valid UTF-8",
                2,
            ),
        ]
    rows += [
        Row(
            "send-id-and-to-key",
            ("send", "<pending>", "approval", "{}", "--to-key", "order-1", *D),
            "name the workflow by its ID or by --to-key, not both",
            2,
        ),
        Row("send-neither-id-nor-to-key", ("send", *D), "name the workflow by its ID or by --to-key\n", 2),
        Row(
            "send-to-key-unknown",
            ("send", "--to-key", "no-such-order", "approval", "{}", *D),
            "no workflow with idempotency key 'no-such-order'",
            6,
        ),
        Row("send-to-key-without-topic", ("send", "--to-key", "order-1", *D), "missing TOPIC", 2),
        Row(
            "show-key-with-escapes",
            ("show", "--key", "k\x1b[2J\u202e", *D),
            "no workflow with idempotency key 'k\\x1b[2J\\u202e'",
            6,
        ),
        Row("cancel-key-with-nul", ("cancel", "--key", "a\x00b", *D), "contains a NUL character", 2),
        Row("list-key-not-utf8", ("list", "--key", "k\udcff", *D), "--key is not valid UTF-8", 2),
    ]
    return rows


def schedule_rows() -> list[Row]:
    """`wfctl schedule ...`, `schedules`, `tick`: nothing stored, no schedule
    changed, no run submitted."""
    add = ("schedule", "add", "nightly", "three")
    rows = [
        Row("schedule-cron-bad-minute", (*add, "61 * * * *", *D), "invalid cron expression '61 * * * *'", 2),
        Row("schedule-cron-31-february", (*add, "0 0 31 2 *", *D), "bad day-of-month", 2),
        Row("schedule-cron-unreachable-db", (*add, "61 * * * *", "--dsn", "<unreachable>"), "bad minute", 2),
        Row("schedule-tz-unknown", (*add, "0 * * * *", "--tz", "Mars/Olympus", *D), "unknown time zone", 2),
        Row(
            "schedule-tz-wrong-case",
            (*add, "0 * * * *", "--tz", "europe/berlin", *D),
            "did you mean Europe/Berlin?",
            2,
        ),
        Row(
            "schedule-type-unknown-strict",
            ("schedule", "add", "nightly", "thre", "0 * * * *", "--strict", *D),
            "unknown workflow type 'thre'",
            2,
        ),
        Row(
            "schedule-name-too-long", ("schedule", "add", "n" * 101, "three", "0 * * * *", *D), "1 to 100", 2
        ),
        Row("schedule-name-nul", ("schedule", "pause", "a\x00b", *D), "NUL", 2),
        Row("schedule-input-array", (*add, "0 * * * *", "--input", "[1, 2]", *D), "not an array", 2),
        Row(
            "schedule-input-malformed",
            (*add, "0 * * * *", "--input", "{bad", *D),
            "malformed JSON --input",
            2,
        ),
        Row(
            "schedule-add-over-code-schedule",
            ("schedule", "add", "three", "three", "0 * * * *", *D),
            "schedule 'three' is declared in code",
            7,
            setup=code_schedule,
        ),
        *[
            Row(f"schedule-{verb}-unknown", ("schedule", verb, "nope", *D), "no schedule named 'nope'", 6)
            for verb in ("pause", "resume", "trigger", "delete")
        ],
        Row("no-schema-schedules", ("schedules", *D), NO_SCHEMA, 5, db="empty"),
        Row("db-unreachable-tick", ("tick", "--dsn", "<unreachable>"), "cannot connect", 4),
    ]
    return rows


def a_limit(ctx: Ctx) -> None:
    """Limits on type 'three', set by an operator and declared by code: a refused `wfctl limit`
    leaves them as they are (the fingerprint compares the row)."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_limits (workflow_type, concurrency, rate_count, rate_seconds,"
            " code_concurrency, code_key_concurrency, rate_tat)"
            " VALUES ('three', 4, 10, 60, 2, 3, now() + interval '1 second')"
        )


def limit_app(arguments: str) -> Setup:
    """An --app module whose decorator declares a bad limit: refused when it is imported."""
    return write(
        "limitapp.py",
        f"import wfctl\n\n\n@wfctl.workflow('capped', {arguments})\ndef capped(ctx, data):\n    return 1\n",
    )


def limit_rows() -> list[Row]:
    """Flow control: `wfctl limit` with a bad value, `submit
    --concurrency-key` out of bounds, and a decorator's bad limit; nothing stored, no limit
    changed (the rows run over an existing limit)."""
    limit = ("limit", "three")
    bad_value = [
        (
            "rate-zero-window",
            ("--rate", "5/0s"),
            "invalid --rate '5/0s': the window must be longer than zero",
        ),
        ("rate-word", ("--rate", "abc"), "invalid --rate 'abc': use a count and a window"),
        ("rate-zero-count", ("--rate", "0/1m"), "the count must be between 1 and 1000000"),
        ("rate-count-over", ("--rate", "1000001/s"), "the count must be between 1 and 1000000"),
        ("rate-window-word", ("--rate", "5/soon"), "invalid --rate window 'soon'"),
        ("rate-window-negative", ("--rate", "5/-1s"), "invalid --rate window '-1s'"),
        ("concurrency-negative", ("--concurrency", "-1"), "--concurrency must be a whole number from 0"),
        ("concurrency-over", ("--concurrency", "1000001"), "not 1000001"),
        ("concurrency-word", ("--concurrency", "x"), "'--concurrency'"),
        ("per-key-zero", ("--per-key", "0"), "--per-key must be a whole number from 1 to 1000000, not 0"),
        ("per-key-negative", ("--per-key", "-3"), "--per-key must be a whole number from 1"),
        ("clear-with-concurrency", ("--clear", "--concurrency", "2"), "--clear drops every limit set here"),
        ("clear-with-rate", ("--rate", "5/s", "--clear"), "give it alone"),
    ]
    rows = [
        Row(f"limit-{name}", (*limit, *args, *D), says, 2, setup=a_limit) for name, args, says in bad_value
    ]
    unknown = "unknown workflow type 'thre': no worker has registered it and no workflow of it exists"
    rows += [
        Row("limit-type-unknown", ("limit", "thre", "--concurrency", "2", *D), unknown, 2, setup=a_limit),
        Row("limit-type-unknown-show", ("limit", "thre", *D), unknown, 2),
        Row("limit-type-unknown-clear", ("limit", "thre", "--clear", *D), unknown, 2),
        Row("limit-type-empty", ("limit", "", "--concurrency", "2", *D), "1 to 100 characters", 2),
        Row("limit-type-too-long", ("limit", "x" * 101, "--per-key", "2", *D), "1 to 100 characters", 2),
        Row("limit-type-not-utf8", ("limit", "t\udcff", *D), "not valid UTF-8", 2),
        Row("no-schema-limit", ("limit", "three", "--concurrency", "2", *D), NO_SCHEMA, 5, db="empty"),
        Row("no-schema-limits", ("limits", *D), NO_SCHEMA, 5, db="empty"),
        Row(
            "limit-rate-before-connecting",
            ("limit", "three", "--rate", "5/0s", "--dsn", "<unreachable>"),
            "5/0s",
            2,
        ),
        Row("db-unreachable-limits", ("limits", "--dsn", "<unreachable>"), "cannot connect", 4),
    ]
    key = ("submit", "three", "{}", "--concurrency-key")
    rows += [
        Row(
            "submit-concurrency-key-empty",
            (*key, "", *D),
            "--concurrency-key must have 1 to 200 characters",
            2,
        ),
        Row("submit-concurrency-key-201", (*key, "k" * 201, *D), "1 to 200 characters, not 201", 2),
        Row(
            "submit-concurrency-key-not-utf8",
            (*key, "k\udcff", *D),
            "--concurrency-key is not valid UTF-8",
            2,
        ),
        Row("submit-concurrency-key-nul", (*key, "a\x00b", *D), "--concurrency-key contains a NUL", 2),
        Row(
            "submit-file-concurrency-key-201",
            ("submit", "three", "--input-file", "-", "--concurrency-key", "k" * 201, *D),
            "1 to 200 characters, not 201",
            2,
            stdin='{"n": 1}\n{"n": 2}\n',
        ),
    ]
    decorated = [
        ("concurrency-zero", "concurrency=0", "concurrency must be a whole number from 1 to 1000000, not 0"),
        ("rate-word", "rate='x'", "invalid rate 'x': use a count and a window"),
        ("key-concurrency-negative", "key_concurrency=-1", "key_concurrency must be a whole number from 1"),
        ("rate-zero-window", "rate='5/0s'", "invalid rate '5/0s': the window must be longer than zero"),
    ]
    rows += [
        Row(
            f"app-limit-{name}",
            ("worker", "--app", "limitapp", "--burst", *D),
            f"importing --app limitapp failed: InvalidInput: {says}",
            9,
            process=True,
            setup=limit_app(arguments),
        )
        for name, arguments, says in decorated
    ]
    return rows


ROWS: list[Row] = [
    # -- submit: the input --
    Row("json-malformed", ("submit", "three", "{bad", *D), "malformed JSON input", 2),
    Row("json-truncated", ("submit", "three", '{"a": 1', *D), "malformed JSON input", 2),
    Row("json-empty-argument", ("submit", "three", "", *D), "malformed JSON input", 2),
    Row("json-trailing-garbage", ("submit", "three", '{"a": 1} x', *D), "malformed JSON input", 2),
    Row("json-nan", ("submit", "three", '{"a": NaN}', *D), "cannot be stored: Out of range float", 2),
    Row("json-nul-escape", ("submit", "three", '{"a": "\\u0000"}', *D), "\\u0000", 2),
    Row("json-lone-surrogate", ("submit", "three", '"\\ud800"', *D), "surrogate", 2),
    Row("input-over-limit", ("submit", "three", BIG, *D), f"over the limit of {MAX_INPUT_BYTES} bytes", 2),
    Row("input-at-limit-is-accepted", ("submit", "three", EXACT, *D), "", 0, check=stored_one),
    Row(
        "jsonl-one-bad-line",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "line 3",
        2,
        setup=write("in.jsonl", '{"n": 1}\n{"n": 2}\n{"n": oops}\n{"n": 4}\n'),
    ),
    Row(
        "jsonl-bad-line-says-nothing-stored",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "nothing was submitted",
        2,
        setup=write("in.jsonl", '{"n": 1}\n[1,\n'),
    ),
    Row(
        "jsonl-stdin-bad-line",
        ("submit", "three", "--input-file", "-", *D),
        "line 2",
        2,
        stdin='{"n": 1}\n{"n": \n{"n": 3}\n',
    ),
    Row(
        "jsonl-line-over-limit",
        ("submit", "three", "--input-file", "big.jsonl", *D),
        "line 2 is",
        2,
        setup=write("big.jsonl", '{"n": 1}\n' + BIG + "\n"),
    ),
    Row(
        "jsonl-nul-escape-line",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "line 2",
        2,
        setup=write("in.jsonl", '{"n": 1}\n{"a": "\\u0000"}\n'),
    ),
    Row(
        "jsonl-non-utf8",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "not valid UTF-8 (line 2",
        2,
        setup=write("in.jsonl", b'{"n": 1}\n{"n": "\xff"}\n'),
    ),
    Row(
        "jsonl-empty-file",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "holds no workflow input",
        2,
        setup=write("in.jsonl", "\n\n"),
    ),
    Row(
        "jsonl-missing-file",
        ("submit", "three", "--input-file", "nope.jsonl", *D),
        "cannot read --input-file",
        2,
    ),
    Row(
        "jsonl-directory",
        ("submit", "three", "--input-file", "adir", *D),
        "cannot read --input-file",
        2,
        setup=make_dir("adir"),
    ),
    Row("json-and-input-file", ("submit", "three", "{}", "--input-file", "x.jsonl", *D), "not both", 2),
    Row("key-with-input-file", ("submit", "three", "--input-file", "x.jsonl", "--key", "k", *D), "--key", 2),
    # -- submit: the options and the type --
    Row(
        "max-retries-negative", ("submit", "three", "{}", "--max-retries", "-1", *D), "cannot be negative", 2
    ),
    Row(
        "max-retries-over-int",
        ("submit", "three", "{}", "--max-retries", "2147483648", *D),
        "--max-retries",
        2,
    ),
    Row("priority-not-a-number", ("submit", "three", "{}", "--priority", "x", *D), "'--priority'", 2),
    Row("priority-over-int", ("submit", "three", "{}", "--priority", "2147483648", *D), "--priority", 2),
    Row(
        "priority-over-int-file",
        ("submit", "three", "--input-file", "-", "--priority", "2147483648", *D),
        "--priority",
        2,
        stdin="{}\n",
    ),
    Row("type-missing", ("submit", *D), "Missing argument", 2),
    Row("type-empty", ("submit", "", "{}", *D), "1 to 100 characters", 2),
    Row("type-too-long", ("submit", "x" * 101, "{}", *D), "1 to 100 characters", 2),
    Row(
        "type-unknown-to-workers",
        ("submit", "thre", "{}", "--strict", *D),
        "unknown workflow type 'thre'",
        2,
    ),
    Row(
        "type-with-quotes-and-sql",
        ("submit", NASTY, '{"q": "\'; DROP TABLE workflow_steps; --"}', "--force", *D),
        "",
        0,
        check=stored_literally(NASTY),
    ),
    Row(
        "key-with-quotes-and-sql",
        ("submit", "three", '{"q": "\'; DROP TABLE workflow_steps; --"}', "--key", NASTY, *D),
        "",
        0,
        check=stored_literally("three", NASTY),
    ),
    # -- durations --
    *duration_rows(),
    # -- ids and states --
    *[Row(f"{c}-id-not-uuid", (c, "12345", *D), NOT_UUID, 2) for c in ("show", "cancel", "retry")],
    Row("show-id-is-sql", ("show", "'; DELETE FROM workflows; --", *D), NOT_UUID, 2),
    *[Row(f"{c}-id-unknown", (c, "<missing>", *D), "no workflow", 6) for c in ("show", "cancel", "retry")],
    *[
        Row(f"cancel-{s}", ("cancel", f"<{s}>", *D), "there is nothing to cancel", 7)
        for s in ("completed", "failed", "cancelled")
    ],
    *[
        Row(f"retry-{s}", ("retry", f"<{s}>", *D), "only a failed or cancelled workflow can be retried", 7)
        for s in ("running", "pending", "completed")
    ],
    Row(
        "retry-from-step-zero", ("retry", "<failed>", "--from-step", "0", *D), "--from-step counts from 1", 2
    ),
    # -- coordination: send, event, wait, submit --timeout --
    *coordination_rows(),
    *business_key_rows(),
    *schedule_rows(),
    *limit_rows(),
    # -- input as the user gave it, and hostile input --
    Row(
        "input-non-ascii-counts-user-bytes",  # 600 KB of UTF-8 is 1.8 MB once escaped
        ("submit", "three", NON_ASCII, *D),
        "",
        0,
        check=stored_inputs("é" * 300_000),
    ),
    Row(
        "input-non-ascii-over-limit",
        ("submit", "three", NON_ASCII_OVER, *D),
        f"is {len(NON_ASCII_OVER.encode())} bytes, over the limit of {MAX_INPUT_BYTES} bytes",
        2,
    ),
    Row(
        "jsonl-non-ascii-counts-user-bytes",
        ("submit", "three", "--input-file", "in.jsonl", *D),
        "",
        0,
        setup=write("in.jsonl", (NON_ASCII + "\n").encode()),
        check=stored_inputs("é" * 300_000),
    ),
    Row(
        "jsonl-dev-zero",  # read a line at a time, never more than the limit
        ("submit", "three", "--input-file", "/dev/zero", *D),
        f"/dev/zero line 1 is more than {MAX_INPUT_BYTES} bytes, over the limit",
        2,
    ),
    Row(
        "jsonl-long-line-without-newline",
        ("submit", "three", "--input-file", "long.jsonl", *D),
        f"long.jsonl line 2 is more than {MAX_INPUT_BYTES} bytes, over the limit",
        2,
        setup=write("long.jsonl", b'{"n": 1}\n"' + b"x" * (2 * MAX_INPUT_BYTES)),
    ),
    Row(
        "jsonl-stdin-long-line",
        ("submit", "three", "--input-file", "-", *D),
        "stdin line 1 is more than",
        2,
        stdin="x" * (MAX_INPUT_BYTES + 10),
    ),
    Row(
        "jsonl-line-separators-inside-strings",  # lines end at LF only
        ("submit", "three", "--input-file", "sep.jsonl", *D),
        "",
        0,
        setup=write("sep.jsonl", (json.dumps(SEPARATORS, ensure_ascii=False) + "\n").encode()),
        check=stored_inputs(SEPARATORS),
    ),
    Row(
        "jsonl-bom-is-skipped",
        ("submit", "three", "--input-file", "bom.jsonl", *D),
        "",
        0,
        setup=write("bom.jsonl", BOM + b'{"n": 1}\r\n{"n": 2}\r\n'),
        check=stored_inputs({"n": 1}, {"n": 2}),
    ),
    Row(
        "jsonl-bom-inside-is-malformed",
        ("submit", "three", "--input-file", "bom.jsonl", *D),
        "line 2: malformed JSON",
        2,
        setup=write("bom.jsonl", b'{"n": 1}\n' + BOM + b'{"n": 2}\n'),
    ),
    Row("type-not-utf8", ("submit", "ab\udcff", "{}", "--force", *D), "workflow type is not valid UTF-8", 2),
    Row(
        "type-not-utf8-real-argv",
        ("submit", "ab\udcff", "{}", "--force", *D),
        "workflow type is not valid UTF-8 (byte 0xff at byte 2)",
        2,
        process=True,
    ),
    Row(
        "key-not-utf8",
        ("submit", "three", "{}", "--key", "k\udcff", *D),
        "idempotency key is not valid UTF-8",
        2,
    ),
    Row("json-not-utf8", ("submit", "three", '"\udcff"', *D), "JSON input is not valid UTF-8", 2),
    Row("list-type-not-utf8", ("list", "--type", "t\udcff", *D), "--type is not valid UTF-8", 2),
    Row("stats-type-not-utf8", ("stats", "--type", "t\udcff", *D), "--type is not valid UTF-8", 2),
    Row(
        "cancel-reason-not-utf8",
        ("cancel", "<pending>", "--reason", "\udcff", *D),
        "--reason is not valid UTF-8",
        2,
    ),
    Row("dsn-not-utf8", ("stats", "--dsn", "host=\udcff"), "invalid DSN: it is not valid UTF-8", 3),
    Row(
        "pghost-not-utf8",
        ("stats",),
        "cannot connect to \\udcff",
        3,
        env={"PGHOST": "\udcff"},
        check=no_embedded_server,
    ),
    Row("json-nested-1000", ("submit", "three", DEEP_1000, *D), "nested more than 500 levels deep", 2),
    Row("json-nested-501", ("submit", "three", DEEP_501, *D), "nested more than 500 levels deep", 2),
    Row("json-nested-500-is-accepted", ("submit", "three", DEEP_500, *D), "", 0, check=stored_one),
    Row(
        "jsonl-nested-1000",
        ("submit", "three", "--input-file", "deep.jsonl", *D),
        "deep.jsonl line 2 is nested more than 500 levels deep",
        2,
        setup=write("deep.jsonl", '{"n": 1}\n' + DEEP_1000 + "\n"),
    ),
    Row("json-int-over-4300-digits", ("submit", "three", LONG_INT, *D), "more than 4300 digits", 2),
    Row(
        "jsonl-int-over-4300-digits",
        ("submit", "three", "--input-file", "-", *D),
        "stdin line 1 holds an integer of more than 4300 digits",
        2,
        stdin='{"n": ' + LONG_INT + "}\n",
    ),
    Row("show-deep-input-stored-by-sql", ("show", "<deep>", *D), "", 0, setup=deep_workflow),
    Row("show-deep-input-stored-by-sql-json", ("show", "<deep>", "--json", *D), "", 0, setup=deep_workflow),
    Row(
        "list-limit-1e20",
        ("list", "--limit", "100000000000000000000", *D),
        "--limit must be a whole number from 1 to 9223372036854775807, not 100000000000000000000",
        2,
    ),
    Row("list-limit-1e20-literal", ("list", "--limit", "1e20", *D), "'--limit'", 2),
    Row("list-status-bogus", ("list", "--status", "bogus", *D), "invalid status 'bogus'", 2),
    Row("list-limit-zero", ("list", "--limit", "0", *D), "--limit must be a whole number from 1", 2),
    Row(
        "prune-status-running",
        ("prune", "--older-than", "30d", "--status", "running", *D),
        "invalid status",
        2,
    ),
    # -- the partitioned layout (tests/db/test_partitions.py) --
    Row(
        "init-partition-interval-2d",
        ("init", "--partitioned", "--partition-interval", "2d", *D),
        "--partition-interval '2d': use one of 1d, 7d, 30d",
        2,
    ),
    Row(
        "init-partition-interval-alone",
        ("init", "--partition-interval", "7d", *D),
        "--partition-interval goes with --partitioned",
        2,
    ),
    Row(
        "db-partition-interval-1w",
        ("db", "partition", "--partition-interval", "1w", *D),
        "--partition-interval '1w': use one of 1d, 7d, 30d",
        2,
    ),
    Row("db-partition-live-worker", ("db", "partition", *D), f"live worker {LIVE_WORKER} is running", 7),
    Row(
        "db-partition-twice",
        ("db", "partition", *D),
        "this database is partitioned already (every 1d)",
        7,
        setup=partitioned,
    ),
    Row(
        "init-partitioned-other-interval",
        ("init", "--partitioned", "--partition-interval", "30d", *D),
        "partitioned every 1d already, not 30d",
        7,
        setup=partitioned,
    ),
    Row("unknown-command", ("frobnicate",), "No such command", 2),
    Row("unknown-option", ("submit", "three", "--frobnicate", *D), "No such option", 2),
    # -- the --app module (real processes) --
    Row(
        "app-does-not-import",
        ("worker", "--app", "no_such_module_xyz", "--burst", *D),
        "cannot import --app no_such_module_xyz",
        9,
        process=True,
    ),
    Row(
        "app-raises-on-import",
        ("worker", "--app", "brokenapp", "--burst", *D),
        "importing --app brokenapp failed: RuntimeError: boom at import",
        9,
        process=True,
        setup=write("brokenapp.py", "raise RuntimeError('boom at import')\n"),
    ),
    Row(
        "app-syntax-error",
        ("worker", "--app", "syntaxapp", "--burst", *D),
        "importing --app syntaxapp failed: SyntaxError",
        9,
        process=True,
        setup=write("syntaxapp.py", "def broken(:\n"),
    ),
    Row(
        "app-registers-nothing",
        ("worker", "--app", "emptyapp", "--burst", *D),
        "registers no workflow",
        9,
        process=True,
        setup=write("emptyapp.py", "x = 1\n"),
    ),
    Row("app-not-given", ("worker", "--burst", *D), "no --app given", 2, process=True),
    Row(
        "worker-types-unknown",
        ("worker", "--app", "testflows", "--types", "three,nope", "--burst", *D),
        "nope",
        2,
        process=True,
        cwd="apps",
    ),
    Row(
        "worker-concurrency-zero",
        ("worker", "--app", "testflows", "--concurrency", "0", *D),
        "--concurrency must be between 1 and 1000",
        2,
        process=True,
        cwd="apps",
    ),
    Row(
        "worker-log-format",
        ("worker", "--app", "testflows", "--log-format", "xml", *D),
        "--log-format 'xml'",
        2,
        process=True,
        cwd="apps",
    ),
    # -- the database --
    Row(
        "db-unreachable-submit",
        ("submit", "three", "{}", "--dsn", "<unreachable>"),
        "cannot connect to 127.0.0.1:",
        4,
    ),
    Row("db-unreachable-stats", ("stats", "--dsn", "<unreachable>"), "cannot connect to 127.0.0.1:", 4),
    Row("db-unreachable-init", ("init", "--dsn", "<unreachable>"), "cannot connect to 127.0.0.1:", 4),
    Row(
        "db-unreachable-worker",
        ("worker", "--app", "testflows", "--burst", "--dsn", "<unreachable>"),
        "cannot connect to 127.0.0.1:",
        4,
        process=True,
        cwd="apps",
    ),
    Row("db-does-not-exist", ("stats", "--dsn", "<nodb>"), "does not exist", 4),
    *no_schema_rows(),
    Row("schema-contracted-past-wfctl", ("stats", *D), "is too old for the database", 5, setup=newer_schema),
    # -- configuration --
    Row("toml-syntax", ("stats",), "not valid TOML", 3, setup=write("wfctl.toml", "[database\n")),
    Row(
        "toml-unknown-table",
        ("stats",),
        "unknown table [databse]",
        3,
        setup=write("wfctl.toml", "[databse]\n"),
    ),
    Row(
        "toml-unknown-key",
        ("stats",),
        "unknown key 'host' in [database]",
        3,
        setup=write("wfctl.toml", '[database]\nhost = "x"\n'),
    ),
    Row(
        "toml-wrong-type",
        ("stats", *D),
        "[worker] concurrency must be",
        3,
        setup=write("wfctl.toml", '[worker]\nconcurrency = "8"\n'),
    ),
    Row(
        "toml-dsn-and-embedded",
        ("stats",),
        "sets both dsn and embedded",
        3,
        setup=write("wfctl.toml", '[database]\ndsn = "host=x"\nembedded = true\n'),
    ),
    Row(
        "toml-not-utf8", ("stats",), "not valid UTF-8", 3, setup=write("wfctl.toml", b"\xff\xfe[database]\n")
    ),
    Row("toml-is-a-directory", ("stats",), "cannot read config file", 3, setup=make_dir("wfctl.toml")),
    Row("config-option-missing", ("stats", "--config", "nope.toml"), "does not exist", 3),
    Row("config-env-missing", ("stats",), "does not exist", 3, env={"WFCTL_CONFIG": "nope.toml"}),
    Row(
        "toml-bad-worker-heartbeat",
        ("worker", "--config", "<project>/wfctl.toml", *D),
        "invalid --heartbeat '10'",
        2,
        process=True,
        cwd="apps",
        setup=write("wfctl.toml", '[worker]\napp = "testflows"\nheartbeat = "10"\n'),
    ),
    Row(
        "toml-worker-types-not-strings",
        ("stats", *D),
        "[worker] types must be a list of strings, not [1, 2]",
        3,
        setup=write("wfctl.toml", "[worker]\ntypes = [1, 2]\n"),
    ),
    Row(
        "toml-worker-types-not-strings-worker",
        ("worker", "--config", "<project>/wfctl.toml", "--burst", *D),
        "[worker] types must be a list of strings",
        3,
        process=True,
        cwd="apps",
        setup=write("wfctl.toml", '[worker]\napp = "testflows"\ntypes = [1, 2]\n'),
    ),
    Row("config-dev-zero", ("stats", "--config", "/dev/zero", *D), "bigger than 1000000 bytes", 3),
    Row(
        "toml-embedded-false",  # never fall back to the embedded server
        ("stats",),
        "embedded = false, and no database is configured",
        3,
        setup=write("wfctl.toml", "[database]\nembedded = false\n"),
        check=no_embedded_server,
    ),
    Row(
        "toml-dsn-empty",
        ("stats",),
        "[database] dsn is empty",
        3,
        setup=write("wfctl.toml", '[database]\ndsn = ""\n'),
        check=no_embedded_server,
    ),
    Row("dsn-option-empty", ("stats", "--dsn", ""), "--dsn is empty", 2, check=no_embedded_server),
    Row("dsn-option-empty-first", ("--dsn", "", "list"), "--dsn is empty", 2, check=no_embedded_server),
    Row(
        "dsn-option-empty-overrides-first",
        ("--dsn", "<dsn>", "list", "--dsn", " "),
        "--dsn is empty",
        2,
        check=no_embedded_server,
    ),
    Row(
        "dsn-env-empty",
        ("stats",),
        "WFCTL_DSN is set but empty",
        3,
        env={"WFCTL_DSN": ""},
        check=no_embedded_server,
    ),
    Row(
        "toml-dangling-symlink",
        ("stats",),
        "is a symlink to missing.toml, which does not exist",
        3,
        setup=symlink("wfctl.toml", "missing.toml"),
        check=no_embedded_server,
    ),
    Row(
        "toml-dangling-symlink-init",
        ("init",),
        "is a symlink to missing.toml, which does not exist",
        3,
        setup=symlink("wfctl.toml", "missing.toml"),
        check=no_embedded_server,
    ),
    Row("dsn-unknown-option", ("stats", "--dsn", "hots=localhost"), 'invalid connection option "hots"', 3),
    Row("dsn-env-bad-syntax", ("stats",), "invalid DSN", 3, env={"WFCTL_DSN": "host=h dbname"}),
    # -- every secret key is a password --
    Row(
        "sslpassword-bad-dsn-syntax",
        ("stats", "--dsn", f"host=h sslpassword={PASSWORD[:6]} {PASSWORD[6:]}"),
        "invalid DSN",
        3,
        secrets=(PASSWORD[:6], PASSWORD[6:]),
    ),
    Row(
        "sslpassword-unreachable-debug",
        ("--debug", "stats", "--dsn", "<unreachable-sslpw>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row("sslpassword-db-url", ("db", "url", "--dsn", "<unreachable-sslpw>"), "", 0, secrets=(PASSWORD,)),
    Row(
        "sslpassword-db-status-json",
        ("db", "status", "--json", "--dsn", "<dsn-sslpw>"),
        "",
        0,
        secrets=(PASSWORD,),
    ),
    # -- passwords: never echoed --
    Row(
        "password-bad-dsn-syntax",
        ("stats", "--dsn", f"host=h password={PASSWORD[:6]} {PASSWORD[6:]}"),
        "invalid DSN",
        3,
        secrets=(PASSWORD[:6], PASSWORD[6:]),
    ),
    Row(
        "password-bad-dsn-syntax-debug",
        ("--debug", "stats", "--dsn", f"host=h password={PASSWORD[:6]} {PASSWORD[6:]}"),
        "invalid DSN",
        3,
        secrets=(PASSWORD[:6], PASSWORD[6:]),
    ),
    Row(
        "password-unreachable",
        ("stats", "--dsn", "<unreachable-pw>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-unreachable-json",
        ("stats", "--json", "--dsn", "<unreachable-pw>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-unreachable-debug",
        ("--debug", "submit", "three", "{}", "--dsn", "<unreachable-pw>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-url-unreachable",
        ("list", "--dsn", "<unreachable-url>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-url-unreachable-debug-json",
        ("--debug", "--json", "db", "status", "--dsn", "<unreachable-url>"),
        "cannot connect",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-env-unreachable",
        ("recover",),
        "cannot connect",
        4,
        env={"WFCTL_DSN": "<unreachable-pw>"},
        secrets=(PASSWORD,),
    ),
    Row("password-wrong", ("stats", "--dsn", "<wrong-pw>"), "authentication failed", 4, secrets=(PASSWORD,)),
    Row(
        "password-wrong-debug-json",
        ("--debug", "stats", "--json", "--dsn", "<wrong-pw>"),
        "authentication failed",
        4,
        secrets=(PASSWORD,),
    ),
    Row(
        "password-wrong-worker",
        ("worker", "--app", "testflows", "--burst", "--dsn", "<wrong-pw>"),
        "authentication failed",
        4,
        process=True,
        cwd="apps",
        secrets=(PASSWORD,),
    ),
]

IDS = [f"{i:03d}of{len(ROWS)}-{row.name}" for i, row in enumerate(ROWS, start=1)]


@pytest.fixture(scope="module")
def wrong_password_role(pg_server):
    """A login role with a password (TCP clients must give it): the rows send a wrong one."""
    if pg_server.tcp_port is None:
        return None
    role = f"wfctl_bad_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'the-right-one'").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def substitute(text: str, ctx: Ctx) -> str:
    for token, value in ctx.subs.items():
        text = text.replace(token, value)
    return text


def run_row(
    row: Row,
    request: pytest.FixtureRequest,
    clean_env: Path,
    pg_server: Server,
    wrong_password_role: str | None,
    run: Callable[[list[str], dict[str, str]], Result],
) -> None:
    """Set ``row`` up in a fresh database, run its command line through ``run`` (given the
    arguments and environment with their placeholders filled in), and check everything the
    catalogue promises of it."""
    dsn = request.getfixturevalue("empty_dsn" if row.db == "empty" else "dsn")
    ctx = Ctx(dsn=dsn, project=clean_env)
    if row.db == "schema":
        ctx.ids = seed(dsn)
    port = free_port()
    ctx.subs = {
        "<dsn>": dsn,
        "<project>": str(clean_env),
        "<missing>": str(uuid.uuid4()),
        "<unreachable>": unreachable(),
        "<unreachable-pw>": f"host=127.0.0.1 port={port} user=bob password={PASSWORD} dbname=x",
        "<unreachable-url>": f"postgresql://bob:{PASSWORD}@127.0.0.1:{port}/x",
        "<unreachable-sslpw>": f"host=127.0.0.1 port={port} user=bob sslpassword={PASSWORD} dbname=x",
        "<dsn-sslpw>": f"{dsn} sslpassword={PASSWORD}",
        "<nodb>": with_db(dsn, "wfctl_no_such_database_xyz"),
        **{f"<{status}>": wid for status, wid in ctx.ids.items()},
    }
    if "<wrong-pw>" in " ".join(row.args):
        if wrong_password_role is None:
            pytest.skip("the test server does not listen on TCP")
        dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        ctx.subs["<wrong-pw>"] = pg_server.tcp_dsn(dbname, wrong_password_role, PASSWORD)
    if row.setup is not None:
        row.setup(ctx)
    args = [substitute(a, ctx) for a in row.args]
    env = {k: substitute(v, ctx) for k, v in row.env.items()}
    before = fingerprint(dsn)
    result = run(args, env)
    after = fingerprint(dsn)
    debug = "--debug" in args
    output = result.stdout + result.stderr
    assert result.exit_code == row.code, output[-2000:]
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    said = result.stderr
    if as_json and row.code != 0 and not debug:
        # under --json the error is one JSON object on stderr
        [only] = result.stderr.splitlines()
        found = json.loads(only)
        assert found["exit_code"] == row.code, only
        said = found["error"]
    assert row.fragment in said, result.stderr[-2000:]
    if row.code != 0:
        assert result.stdout == "", "an error printed something on stdout"
        if not debug and not as_json:
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and result.stderr.endswith("\n"), result.stderr[-2000:]
            assert lines[0].startswith("wfctl: error: ")
    if not debug:
        assert "Traceback" not in output
    for secret in row.secrets:
        assert secret not in output, "a password was echoed"
    row.check(ctx, before, after)


IN_PROCESS = [(row, id_) for row, id_ in zip(ROWS, IDS, strict=True) if not row.process]
AS_PROCESS = [(row, id_) for row, id_ in zip(ROWS, IDS, strict=True) if row.process]
