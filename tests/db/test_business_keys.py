"""A run named by its business key, the idempotency key it was submitted with: on the command
line (in-process, through the ``cli`` fixture) ``wfctl show``, ``wait``, ``cancel``, ``retry
--key K``, ``wfctl send --to-key K`` and ``wfctl list --key PREFIX``; in Python ``wfctl.result(...,
key=...)``, ``send(..., to_key=...)`` and ``list(..., key=...)``; what the lookups cost, and what
they do when two runs share a key (possible only in the partitioned layout)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from helpers import rows, with_db
from support import run_states as states

import wfctl
from wfctl import keys
from wfctl.queries import q


def ok(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return result


def failed_with(result: Any, code: int) -> str:
    """The one line of an error, after checking the exit code and that stdout is empty."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wfctl: error: "), result.stderr
    return lines[0].removeprefix("wfctl: error: ")


def test_show_by_key_is_show_by_id(cli, dsn):
    wid = states.submitted(dsn, "ship", "order-7")
    by_id = ok(cli("show", str(wid), "--json", "--dsn", dsn))
    by_key = ok(cli("show", "--key", "order-7", "--json", "--dsn", dsn))
    assert json.loads(by_key.stdout)["workflow"]["id"] == str(wid)
    assert json.loads(by_key.stdout)["workflow"]["idempotency_key"] == "order-7"
    drop = ("updated_at", "elapsed_seconds", "deadline_seconds_left")  # none of them moves here anyway
    assert {k: v for k, v in json.loads(by_key.stdout)["workflow"].items() if k not in drop} == {
        k: v for k, v in json.loads(by_id.stdout)["workflow"].items() if k not in drop
    }
    table = ok(cli("show", "--key", "order-7", "--dsn", dsn)).stdout
    assert f"Workflow {wid}" in table and "order-7" in table


def test_cancel_and_retry_by_key(cli, dsn):
    wid = states.submitted(dsn, "ship", "order-7")
    cancelled = ok(cli("cancel", "--key", "order-7", "--reason", "out of stock", "--dsn", dsn))
    assert cancelled.stderr == f"wfctl: cancelled {wid} (it was pending)\n"
    assert rows(dsn, "SELECT status, error_message FROM workflows WHERE id = %s", wid) == [
        ("cancelled", "out of stock")
    ]
    again = cli("cancel", "--key", "order-7", "--dsn", dsn)
    assert failed_with(again, 7) == f"workflow {wid} is already cancelled: there is nothing to cancel"
    retried = ok(cli("retry", "--key", "order-7", "--json", "--dsn", dsn))
    assert json.loads(retried.stdout) == {"id": str(wid), "resumes_after_step": 0, "descendants": 0}
    assert rows(dsn, "SELECT status FROM workflows WHERE id = %s", wid) == [("pending",)]
    running = cli("retry", "--key", "order-7", "--dsn", dsn)
    assert failed_with(running, 7) == (
        f"workflow {wid} is pending: only a failed or cancelled workflow can be retried"
    )
    as_json = ok(cli("cancel", "--key", "order-7", "--json", "--dsn", dsn))
    assert json.loads(as_json.stdout)["id"] == str(wid)


def test_wait_by_key_prints_the_output_or_exits_as_wait_by_id(cli, dsn, conn):
    done = states.submitted(dsn, "ship-done", "order-done")
    states.completed(conn, states.claim(conn, "ship-done"), {"tracking": "ZX-1"})
    out = ok(cli("wait", "--key", "order-done", "--dsn", dsn))
    assert json.loads(out.stdout) == {"tracking": "ZX-1"}
    as_json = ok(cli("wait", "--key", "order-done", "--json", "--dsn", dsn))
    assert json.loads(as_json.stdout) == {
        "id": str(done),
        "status": "completed",
        "output": {"tracking": "ZX-1"},
    }
    broken = states.submitted(dsn, "ship-failed", "order-failed")
    states.failed(conn, states.claim(conn, "ship-failed"), "ValueError: no address")
    assert failed_with(cli("wait", "--key", "order-failed", "--dsn", dsn), 11) == (
        f"workflow {broken} failed: ValueError: no address"
    )
    pending = states.submitted(dsn, "ship", "order-pending")
    late = cli("wait", "--key", "order-pending", "--timeout", "0s", "--dsn", dsn)
    assert failed_with(late, 13) == f"workflow {pending} did not finish within 0s"


def test_send_to_key_delivers_to_the_run_with_that_key(cli, dsn, conn):
    wid = states.submitted(dsn, "approve", "order-7")
    states.on_a_message(conn, states.claim(conn, "approve"), "approval", timeout=None)
    sent = ok(cli("send", "--to-key", "order-7", "approval", '{"ok": true}', "--dsn", dsn))
    assert sent.stdout == f"sent message 1 to {wid} on 'approval'\n"
    # --key is the message's own key, --to-key the run's: both at once, and again
    twice = ["send", "--to-key", "order-7", "approval", '{"ok": false}', "--key", "msg-1", "--json"]
    first = json.loads(ok(cli(*twice, "--dsn", dsn)).stdout)
    second = json.loads(ok(cli(*twice, "--dsn", dsn)).stdout)
    assert first == {"id": 2, "workflow_id": str(wid), "topic": "approval", "created": True}
    assert second == {**first, "created": False}
    bare = ok(cli("send", "--to-key", "order-7", "nudge", "--dsn", dsn))  # no payload
    assert bare.stdout == f"sent message 3 to {wid} on 'nudge'\n"
    assert rows(dsn, "SELECT id, topic, payload, idempotency_key FROM workflow_messages ORDER BY id") == [
        (1, "approval", {"ok": True}, None),
        (2, "approval", {"ok": False}, "msg-1"),
        (3, "nudge", None, None),
    ]
    assert wfctl.get(dsn, wid).wait.state == "woken"  # type: ignore[union-attr]
    missing = cli("send", "--to-key", "order-7", "--dsn", dsn)
    assert failed_with(missing, 2).startswith("missing TOPIC")
    both = cli("send", str(wid), "approval", "{}", "--to-key", "order-7", "--dsn", dsn)
    assert failed_with(both, 2) == "name the workflow by its ID or by --to-key, not both"


# -- in Python ------------------------------------------------------------------------------------


def test_result_and_send_by_key_reach_the_run_with_that_key(dsn, conn):
    done = states.submitted(dsn, "ship-done", "order-done")
    states.completed(conn, states.claim(conn, "ship-done"), {"tracking": "ZX-1"})
    assert wfctl.result(dsn, key="order-done") == {"tracking": "ZX-1"}
    broken = states.submitted(dsn, "ship-failed", "order-failed")
    states.failed(conn, states.claim(conn, "ship-failed"), "ValueError: no address")
    with pytest.raises(wfctl.WorkflowFailed) as failed:
        wfctl.result(dsn, key="order-failed")
    assert failed.value.workflow_id == broken
    waiting = states.submitted(dsn, "approve", "order-7")
    states.on_a_message(conn, states.claim(conn, "approve"), "approval", timeout=None)
    first = wfctl.send(dsn, topic="approval", payload={"ok": True}, to_key="order-7", key="msg-1")
    assert wfctl.send(dsn, None, "approval", {"ok": False}, to_key="order-7", key="msg-1") == first
    assert rows(dsn, "SELECT workflow_id, payload FROM workflow_messages") == [(waiting, {"ok": True})]
    with pytest.raises(wfctl.InvalidState, match="takes no more messages"):
        wfctl.send(dsn, topic="approval", to_key="order-done")
    assert done != waiting


def test_an_unknown_key_is_not_found_and_named_escaped(dsn):
    for call in (
        lambda key: wfctl.result(dsn, key=key, timeout=0),
        lambda key: wfctl.send(dsn, topic="approval", to_key=key),
    ):
        with pytest.raises(wfctl.NotFound) as found:
            call("no-such-order")
        assert str(found.value) == "no workflow with idempotency key 'no-such-order'"
        with pytest.raises(wfctl.NotFound) as escaped:
            call("evil\x1b[2J\u202ekey\n")
        assert str(escaped.value) == "no workflow with idempotency key 'evil\\x1b[2J\\u202ekey\\x0a'"
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


def test_an_id_and_a_key_together_or_neither_is_invalid_input(dsn):
    wid = states.submitted(dsn, "ship", "order-7")
    with pytest.raises(wfctl.InvalidInput, match="not both"):
        wfctl.result(dsn, wid, key="order-7")
    with pytest.raises(wfctl.InvalidInput, match=r"^name the workflow by its id or by key=$"):
        wfctl.result(dsn)
    with pytest.raises(wfctl.InvalidInput, match="not both"):
        wfctl.send(dsn, wid, "approval", to_key="order-7")
    with pytest.raises(wfctl.InvalidInput, match=r"^name the workflow by its id or by to_key=$"):
        wfctl.send(dsn, topic="approval")
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]


# -- the prefix search ----------------------------------------------------------------------------

TRICKY = [
    "50%-off-1",
    "50x-off-2",  # matched by the LIKE pattern '50%' but not by the prefix "50%"
    "a_b-1",
    "axb-2",  # matched by 'a_b%' but not by "a_b"
    "a\\b",
    "p",
    "p\U0010ffff",
    "p\U0010ffffz",
    "q",
    "é-1",
    "e-1",
    "\ud7ff-x",
    "\ue000-y",
]


@pytest.mark.parametrize(
    "prefix", ["50%", "50", "a_b", "a_", "a\\", "p", "p\U0010ffff", "é", "e", "\ud7ff", "", "zzz"]
)
def test_list_key_matches_the_prefix_character_for_character(cli, dsn, prefix):
    ids = {key: states.submitted(dsn, "promo", key) for key in TRICKY}
    states.submitted(dsn, "promo")  # no key: never listed by --key
    listed = json.loads(ok(cli("list", "--key", prefix, "--json", "--dsn", dsn)).stdout)
    wanted = {k for k in TRICKY if k.startswith(prefix)}
    assert {r["idempotency_key"] for r in listed} == wanted
    assert {r["id"] for r in listed} == {str(ids[k]) for k in wanted}
    assert {(r.id, r.idempotency_key) for r in wfctl.list(dsn, key=prefix)} == {(ids[k], k) for k in wanted}


def test_list_key_adds_the_key_to_the_table_newest_first(cli, dsn):
    first = states.submitted(dsn, "promo", "promo-1")
    second = states.submitted(dsn, "promo", "promo-2")
    states.submitted(dsn, "promo", "other-3")
    table = ok(cli("list", "--key", "promo-", "--dsn", dsn)).stdout.splitlines()
    header = next(line for line in table if " id " in line)
    assert header.split()[1:4] == ["id", "┃", "key"]
    body = [line for line in table if "promo-" in line]
    assert [str(second) in body[0], str(first) in body[1], len(body)] == [True, True, 2]
    assert "key" not in ok(cli("list", "--dsn", dsn)).stdout.splitlines()[1]
    empty = ok(cli("list", "--key", "nope-", "--dsn", dsn))
    assert empty.stdout == "" and empty.stderr == "wfctl: no workflows match\n"


def test_without_the_range_the_prefix_search_finds_the_same_keys(conn):
    """Under a linguistic collation (keys.code_point_order false) the search does without the
    range the key's index serves; it finds the same runs, by starts_with alone."""
    for key in TRICKY:
        wfctl.submit(conn, "promo", {}, key=key)
    for prefix in ("50%", "a_b", "p\U0010ffff", "é", ""):
        params = {
            "status": None, "statuses": None, "workflow_type": None, "since": None, "limit": 100,
            "waiting": False,
            **keys.prefix_params(conn, prefix), "key_ranged": False,
        }  # fmt: skip
        found = {r[6] for r in conn.execute(q("reports.list_workflows"), params)}
        assert found == {k for k in TRICKY if k.startswith(prefix)}, prefix


# -- the plans ------------------------------------------------------------------------------------


def many_keyed_runs(conn: psycopg.Connection[Any], count: int = 20_000) -> None:
    """``count`` runs keyed order-1 ... order-N (every third without a key), created a second
    apart; statistics fresh."""
    conn.execute(
        "INSERT INTO workflows (workflow_type, idempotency_key, created_at)"
        " SELECT 'bulk', CASE WHEN n %% 3 = 0 THEN NULL ELSE 'order-' || n END,"
        " now() - n * interval '1 second' FROM generate_series(1, %s) n",
        (count,),
    )
    conn.execute("ANALYZE workflows")


def plan(conn: psycopg.Connection[Any], block: str, params: dict[str, Any]) -> str:
    found = conn.execute(b"EXPLAIN " + q(block).encode(), params).fetchall()
    return "\n".join(r[0] for r in found)


def key_index(layout: str) -> str:
    return "workflows_idempotency_key_key" if layout == "default" else "idempotency"


def test_the_lookup_by_key_uses_the_key_index(conn, layout):
    many_keyed_runs(conn)
    found = plan(conn, "keys.runs", {"key": "order-77", "limit": keys.NAMED + 1})
    assert "Index Scan" in found and key_index(layout) in found, found
    if layout == "default":  # the partitioned layout's empty partitions may be read whole
        assert "Seq Scan" not in found, found


def test_the_prefix_search_uses_the_key_index_where_text_is_in_code_point_order(conn, layout):
    params = keys.prefix_params(conn, "order-77")
    if not params["key_ranged"]:
        pytest.skip("the test server's collation is linguistic: the search goes without the range")
    many_keyed_runs(conn)
    found = plan(
        conn,
        "reports.list_workflows",
        {
            "status": None,
            "statuses": None,
            "workflow_type": None,
            "since": None,
            "limit": 50,
            "waiting": False,
            **params,
        },
    )
    assert key_index(layout) in found and "Index Cond: ((idempotency_key >= 'order-77'" in found, found
    assert "idempotency_key < 'order-78'" in found and "starts_with(idempotency_key" in found, found
    listed = {r.idempotency_key for r in wfctl.list(conn, key="order-77", limit=200)}
    assert listed == {f"order-{n}" for n in range(1, 20_001) if str(n).startswith("77") and n % 3}


def test_the_collation_decides_whether_the_range_is_used(pg_server):
    """C and C.UTF-8 order text by code point; an ICU collation orders it by its letters."""
    made: list[str] = []
    answers: dict[str, bool] = {}
    locales = {
        "c": "LOCALE 'C'",
        "c_utf8": "LOCALE 'C.UTF-8'",
        "icu": "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'",
    }
    try:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            for name, locale in locales.items():
                db = f"wfctl_t_collation_{name}_{uuid4().hex[:8]}"
                try:
                    admin.execute(f"CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8' {locale}")
                except psycopg.errors.Error as exc:  # no ICU in this build, no C.UTF-8 locale
                    print(f"{name}: {exc}")
                    continue
                made.append(db)
                with psycopg.connect(with_db(pg_server.admin_dsn, db)) as there:
                    answers[name] = there.execute(q("keys.code_point_order")).fetchone()[0]
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            for db in made:
                admin.execute(f"DROP DATABASE IF EXISTS {db}")
    assert answers.get("c") is True
    assert answers.get("c_utf8", True) is True
    assert answers.get("icu", False) is False


# -- two runs with one key ------------------------------------------------------------------------


def shared_key(dsn: str) -> tuple[UUID, UUID]:
    """Two runs with the key 'order-7': the second took it by an UPDATE, which the partitioned
    layout's trigger (BEFORE INSERT) does not see; returns (older, newer)."""
    older = states.submitted(dsn, "ship", "order-7")
    newer = states.submitted(dsn, "ship", "order-8")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE workflows SET idempotency_key = 'order-7' WHERE id = %s", (newer,))
    return older, newer


@pytest.mark.parametrize("layout", ["partitioned"], indirect=True)
def test_a_key_two_runs_share_names_both_and_acts_on_neither(cli, dsn, layout):
    older, newer = shared_key(dsn)
    before = rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id")
    named = f"idempotency key 'order-7' names more than one workflow ({newer}, {older}, newest first): "
    named += "name one by its id"
    for args in (
        ("show", "--key", "order-7"),
        ("wait", "--key", "order-7", "--timeout", "0s"),
        ("cancel", "--key", "order-7"),
        ("retry", "--key", "order-7"),
        ("send", "--to-key", "order-7", "approval", "{}"),
    ):
        assert failed_with(cli(*args, "--dsn", dsn), 7) == named, args
    for call in (
        lambda: wfctl.get(dsn, key="order-7"),
        lambda: wfctl.result(dsn, key="order-7", timeout=0),
        lambda: wfctl.cancel(dsn, key="order-7"),
        lambda: wfctl.retry(dsn, key="order-7"),
        lambda: wfctl.send(dsn, topic="approval", to_key="order-7"),
    ):
        with pytest.raises(wfctl.InvalidState) as refused:
            call()
        assert str(refused.value) == named
    assert rows(dsn, "SELECT id, status, updated_at FROM workflows ORDER BY id") == before
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]
    wfctl.send(dsn, older, "approval")  # each by its id
    assert rows(dsn, "SELECT workflow_id FROM workflow_messages") == [(older,)]
    assert wfctl.cancel(dsn, newer).id == newer
    listed = wfctl.list(dsn, key="order-7")  # the list shows both
    assert [(r.id, r.status) for r in listed] == [(newer, "cancelled"), (older, "pending")]
    shown = json.loads(ok(cli("list", "--key", "order-7", "--json", "--dsn", dsn)).stdout)
    assert [(r["id"], r["status"]) for r in shown] == [(str(newer), "cancelled"), (str(older), "pending")]


@pytest.mark.parametrize("layout", ["default"], indirect=True)
def test_the_default_layout_cannot_give_two_runs_one_key(dsn, layout):
    with pytest.raises(psycopg.errors.UniqueViolation):
        shared_key(dsn)
    assert wfctl.get(dsn, key="order-7").idempotency_key == "order-7"


# -- who may look a key up ------------------------------------------------------------------------


def test_a_lookup_by_key_reads_the_runs_which_a_submit_role_may_not(jobs, dsn):
    """A role given --grant-submit reaches a run by its id only (through functions); naming it
    by its key reads the workflows table, which --grant-read and --grant-worker may."""
    roles, names = jobs
    wid = states.submitted(dsn, "ship", "order-7")
    as_submit = roles.dsn_of(names["submit"])
    with pytest.raises(wfctl.WaitTimeout):
        wfctl.result(as_submit, wid, timeout=0)  # by id: allowed
    with pytest.raises(wfctl.PermissionDenied):
        wfctl.result(as_submit, key="order-7", timeout=0)
    with pytest.raises(wfctl.PermissionDenied):
        wfctl.send(as_submit, topic="approval", to_key="order-7")
    assert rows(dsn, "SELECT count(*) FROM workflow_messages") == [(0,)]
    for job in ("read", "worker"):
        assert wfctl.get(roles.dsn_of(names[job]), key="order-7").id == wid, job
    with pytest.raises(wfctl.WaitTimeout):
        wfctl.result(roles.dsn_of(names["worker"]), key="order-7", timeout=0)
