"""`wfctl limit` and `wfctl limits`, and `wfctl submit --concurrency-key`
with what `wfctl show` says of it.

The limits come from two places: code (the worker of tests/apps/limitflows.py writes what its
decorators declare when it starts) and operators (`wfctl limit`). The tables say who set each
value in force: "(code)" or "(set)"; `--json` gives both sets of values and the one in force.
A worker of limitflows is run once as `--burst` (it declares, finds nothing to do and exits),
so the tests that only read and write limits need no worker that keeps running."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from helpers import rows

import wfctl
from wfctl import limits

APP = "limitflows"
COLUMNS = ["type", "concurrency", "per key", "rate", "running", "keys running", "runnable"]
NOTHING_SET = {"concurrency": None, "key_concurrency": None, "rate": None}


def ok(cli, dsn: str, *args: str) -> Any:
    """``wfctl ARGS --dsn DSN``, which must exit 0; its result."""
    result = cli(*args, "--dsn", dsn)
    assert result.exit_code == 0, result.output
    return result


def table(text: str) -> dict[str, dict[str, str]]:
    """The rows of a `wfctl limits` table, by type: column name -> cell."""
    lines = text.splitlines()
    header = [cell.strip() for cell in lines[1].strip("┃").split("┃")]
    assert header == COLUMNS, text
    found = {}
    for line in lines:
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            found[cells[0]] = dict(zip(COLUMNS, cells, strict=True))
    return found


def listed(cli, dsn: str, *args: str) -> list[dict[str, Any]]:
    """`--json` of `wfctl limits` (or `wfctl limit ...`), without the change times."""
    found = json.loads(ok(cli, dsn, *args, "--json").stdout)
    for item in found:
        assert item.pop("changed_at") is not None
    return found  # type: ignore[no-any-return]


def stored(dsn: str, workflow_type: str) -> tuple[Any, ...]:
    return rows(
        dsn,
        "SELECT concurrency, key_concurrency, rate_count, rate_seconds, code_concurrency,"
        " code_key_concurrency, code_rate_count, code_rate_seconds FROM workflow_limits"
        " WHERE workflow_type = %s",
        workflow_type,
    )[0]


@pytest.fixture
def declared(dsn: str, workers) -> str:
    """A database into which a limitflows worker has written what its code declares."""
    workers.run("--burst-wait", "0s", app=APP)
    return dsn


def test_limits_lists_what_the_code_declares(declared: str, cli) -> None:
    shown = table(ok(cli, declared, "limits").stdout)
    assert list(shown) == ["capped", "gated", "metered", "quota", "tenant"]  # plain declares none
    assert shown["capped"] == {
        "type": "capped",
        "concurrency": "3 (code)",
        "per key": "-",
        "rate": "-",
        "running": "0",
        "keys running": "-",  # no per-key limit: not counted
        "runnable": "0",
    }
    assert (shown["quota"]["concurrency"], shown["quota"]["per key"], shown["quota"]["rate"]) == (
        "4 (code)",
        "1 (code)",
        "30/m (code)",
    )
    assert shown["quota"]["keys running"] == "0"
    assert shown["metered"]["rate"] == "20/s (code)"
    assert shown["tenant"]["per key"] == "2 (code)"
    quota = [item for item in listed(cli, declared, "limits") if item["workflow_type"] == "quota"]
    assert quota == [
        {
            "workflow_type": "quota",
            "concurrency": 4,
            "key_concurrency": 1,
            "rate": "30/m",
            "set": NOTHING_SET,
            "code": {"concurrency": 4, "key_concurrency": 1, "rate": "30/m"},
            "running": 0,
            "runnable": 0,
            "running_keys": 0,
        }
    ]


def test_an_operators_values_override_the_codes_and_clear_returns_to_them(declared: str, cli) -> None:
    result = ok(cli, declared, "limit", "capped", "--concurrency", "5")
    assert table(result.stdout)["capped"]["concurrency"] == "5 (set)"  # the type, as it is now
    assert result.stderr == ""
    # another kind beside it: the code's concurrency is still there, overridden
    shown = table(ok(cli, declared, "limit", "capped", "--rate", "10/1m").stdout)["capped"]
    assert (shown["concurrency"], shown["rate"]) == ("5 (set)", "10/m (set)")
    # a kind the code declares and the operator leaves alone says "(code)"
    shown = table(ok(cli, declared, "limit", "quota", "--per-key", "3").stdout)["quota"]
    assert (shown["concurrency"], shown["per key"], shown["rate"]) == ("4 (code)", "3 (set)", "30/m (code)")
    assert stored(declared, "capped") == (5, None, 10, 60.0, 3, None, None, None)
    (capped,) = listed(cli, declared, "limit", "capped")
    assert capped == {
        "workflow_type": "capped",
        "concurrency": 5,
        "key_concurrency": None,
        "rate": "10/m",
        "set": {"concurrency": 5, "key_concurrency": None, "rate": "10/m"},
        "code": {"concurrency": 3, "key_concurrency": None, "rate": None},
        "running": 0,
        "runnable": 0,
        "running_keys": 0,
    }

    # --clear: the code's values apply again, and only the code's
    shown = table(ok(cli, declared, "limit", "capped", "--clear").stdout)["capped"]
    assert (shown["concurrency"], shown["rate"]) == ("3 (code)", "-")
    assert stored(declared, "capped") == (None, None, None, None, 3, None, None, None)
    (capped,) = listed(cli, declared, "limit", "capped")
    assert (capped["set"], capped["concurrency"], capped["rate"]) == (NOTHING_SET, 3, None)
    again = ok(cli, declared, "limit", "capped", "--clear")
    assert again.stderr == "wfctl: no limits were set on capped with wfctl limit: nothing changed\n"
    assert table(again.stdout)["capped"]["concurrency"] == "3 (code)"


def test_a_limit_on_a_type_the_code_does_not_limit_goes_with_clear(declared: str, cli) -> None:
    shown = table(ok(cli, declared, "limit", "plain", "--per-key", "4", "--concurrency", "0").stdout)
    assert (shown["plain"]["per key"], shown["plain"]["concurrency"]) == ("4 (set)", "0 (set)")
    assert "plain" in table(ok(cli, declared, "limits").stdout)
    cleared = ok(cli, declared, "limit", "plain", "--clear")
    assert (cleared.stdout, cleared.stderr) == ("", "wfctl: plain has no limits\n")
    assert "plain" not in table(ok(cli, declared, "limits").stdout)
    assert json.loads(ok(cli, declared, "limit", "plain", "--clear", "--json").stdout) == []


def test_limit_with_the_type_alone_shows_it_and_changes_nothing(declared: str, cli) -> None:
    before = rows(declared, "SELECT * FROM workflow_limits ORDER BY workflow_type")
    shown = table(ok(cli, declared, "limit", "metered").stdout)
    assert list(shown) == ["metered"] and shown["metered"]["rate"] == "20/s (code)"
    assert [item["workflow_type"] for item in listed(cli, declared, "limit", "metered")] == ["metered"]
    # a known type without limits: one line, exit 0; --json: an empty list
    alone = ok(cli, declared, "limit", "plain")
    assert (alone.stdout, alone.stderr) == ("", "wfctl: plain has no limits\n")
    assert json.loads(ok(cli, declared, "limit", "plain", "--json").stdout) == []
    assert rows(declared, "SELECT * FROM workflow_limits ORDER BY workflow_type") == before


def test_limits_without_any_prints_one_line(dsn: str, cli) -> None:
    result = ok(cli, dsn, "limits")
    assert (result.stdout, result.stderr) == ("", "wfctl: no workflow type has limits\n")
    result = ok(cli, dsn, "limits", "--json")
    assert (json.loads(result.stdout), result.stderr) == ([], "")


def test_limits_counts_what_runs_and_what_waits(declared: str, cli) -> None:
    """running: runs holding a lease (running or claimed ahead); keys running: their distinct
    keys; runnable: pending and due (parked and delayed runs are not)."""
    with psycopg.connect(declared, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflows (workflow_type, status, concurrency_key)"
            " VALUES ('tenant', 'running', 'a'), ('tenant', 'running', 'a'), ('tenant', 'running', 'b'),"
            " ('tenant', 'running', NULL), ('tenant', 'pending', 'c'), ('tenant', 'completed', 'd')"
        )
        conn.execute(
            "INSERT INTO workflows (workflow_type, run_at, wait_kind)"
            " VALUES ('tenant', now() + interval '1 hour', NULL), ('tenant', '9999-12-31', 'message')"
        )
    shown = table(ok(cli, declared, "limits").stdout)["tenant"]
    assert (shown["running"], shown["keys running"], shown["runnable"]) == ("4", "2", "1")
    (tenant,) = listed(cli, declared, "limit", "tenant")
    assert (tenant["running"], tenant["running_keys"], tenant["runnable"]) == (4, 2, 1)


def test_the_last_worker_to_start_writes_the_codes_values(declared: str, cli) -> None:
    """A worker of another version whose code declares no limit for capped (a deploy rolling
    back) clears the code's values; the operator's stay. The next limitflows worker writes them
    again."""
    ok(cli, declared, "limit", "capped", "--rate", "2/s")
    with psycopg.connect(declared, autocommit=True) as conn:
        assert limits.declare(conn, [("capped", limits.Limits())]) == 1
    shown = table(ok(cli, declared, "limits").stdout)["capped"]
    assert (shown["concurrency"], shown["rate"]) == ("-", "2/s (set)")
    with psycopg.connect(declared, autocommit=True) as conn:
        assert limits.declare(conn, [("capped", limits.Limits(concurrency=3))]) == 1
        assert limits.declare(conn, [("capped", limits.Limits(concurrency=3))]) == 0  # unchanged
    shown = table(ok(cli, declared, "limits").stdout)["capped"]
    assert (shown["concurrency"], shown["rate"]) == ("3 (code)", "2/s (set)")


def test_a_changed_rate_restarts_the_rates_schedule(dsn: str, workers, cli) -> None:
    """plain at 1/1h: of two runs, the first starts and the second waits an hour. Setting another
    limit keeps the rate's schedule; a changed rate starts afresh, and the worker (woken by the
    change) starts the second run at once. (Both runs are stored before the worker starts.)"""
    first = wfctl.submit(dsn, "plain", {"pause": 0})
    second = wfctl.submit(dsn, "plain", {"pause": 0})
    ok(cli, dsn, "limit", "plain", "--rate", "1/1h")
    workers.start(app=APP)
    assert wfctl.result(dsn, first, timeout=30) == 0
    (tat,) = rows(dsn, "SELECT rate_tat FROM workflow_limits WHERE workflow_type = 'plain'")[0]
    assert rows(dsn, "SELECT %s > now() + interval '59 minutes'", tat) == [(True,)]
    shown = table(ok(cli, dsn, "limit", "plain", "--concurrency", "5").stdout)["plain"]
    assert (shown["rate"], shown["runnable"]) == ("1/h (set)", "1")  # held back by the rate
    assert rows(dsn, "SELECT rate_tat FROM workflow_limits WHERE workflow_type = 'plain'") == [(tat,)]
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", second) == [("pending",)]
    ok(cli, dsn, "limit", "plain", "--rate", "2/1h")
    assert wfctl.result(dsn, second, timeout=10) == 0


def test_submit_with_a_concurrency_key_and_show_it(dsn: str, cli, tmp_path) -> None:
    one = ok(cli, dsn, "submit", "tenant", "{}", "--concurrency-key", "customer-42").stdout.strip()
    batch = tmp_path / "runs.jsonl"
    batch.write_text('{"n": 1}\n{"n": 2}\n')
    ids = ok(cli, dsn, "submit", "tenant", "--input-file", str(batch), "--concurrency-key", "c 7").stdout
    plain = ok(cli, dsn, "submit", "tenant", "{}").stdout.strip()
    keys = dict(rows(dsn, "SELECT id::text, concurrency_key FROM workflows"))
    assert keys == {one: "customer-42", **dict.fromkeys(ids.split(), "c 7"), plain: None}

    shown = ok(cli, dsn, "show", one).stdout
    assert [line.split() for line in shown.splitlines() if "concurrency key" in line] == [
        ["concurrency", "key", "customer-42"]
    ]
    assert "concurrency key" not in ok(cli, dsn, "show", plain).stdout  # only for a run with one
    assert (
        json.loads(ok(cli, dsn, "show", one, "--json").stdout)["workflow"]["concurrency_key"] == "customer-42"
    )
    assert json.loads(ok(cli, dsn, "show", plain, "--json").stdout)["workflow"]["concurrency_key"] is None
