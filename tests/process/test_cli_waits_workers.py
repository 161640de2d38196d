"""What the CLI says about waiting workflows: `show` of a workflow parked on a message, on children,
on a sleep; `list --waiting`; `stats` never reports a waiting workflow as stuck nor as backlog;
the `metrics` gauge; `cancel` of a parent names the descendants it cancelled; `recover` fails runs
past their deadline (and `--dry-run` does not). Real workers run tests/apps/waitflows.py; children
of type ``idle`` are run by no worker.

The tests of it that start worker processes; those that need only the database are in
tests/db/test_cli_waits.py.
"""

from __future__ import annotations

import json
import re
import signal
import uuid
from typing import Any

import pytest
from helpers import rows, wait_for
from support.cli_waits import line_of, show, show_json

import wfctl

APP = "waitflows"


SERVED = "approval,quick,fan,nap,held,family"  # not idle


def state(dsn: str, wid: object) -> tuple[str, str | None, int | None]:
    return rows(dsn, "SELECT status, wait_kind, wait_remaining FROM workflows WHERE id = %s", wid)[0]


def parked(dsn: str, wid: object, kind: str, remaining: int | None = None) -> bool:
    return state(dsn, wid) == ("pending", kind, remaining)


@pytest.fixture
def waiting(dsn: str, workers) -> dict[str, Any]:
    """One worker (not running ``idle``) and three parked workflows: on a message with a 1h
    timeout, on 20 children of which 15 stay pending, and in a 1h sleep with a 2h deadline."""
    proc = workers.start("--types", SERVED, app=APP)
    message = wfctl.submit(dsn, "approval", {"timeout": 3600})
    fan = wfctl.submit(dsn, "fan", {"quick": 5, "idle": 15})
    nap = wfctl.submit(dsn, "nap", {"sleep": "1h"}, timeout="2h")
    # the first wait includes the worker's start (60s: a loaded machine)
    wait_for(lambda: parked(dsn, message, "message"), timeout=60, what="the approval to park on its message")
    wait_for(lambda: parked(dsn, fan, "children", 15), what="the fan to wait for its 15 idle children")
    wait_for(lambda: parked(dsn, nap, "sleep"), what="the nap to park in its sleep")
    return {"message": message, "fan": fan, "nap": nap, "worker": proc}


def test_show_of_a_workflow_parked_on_a_message(cli, dsn: str, waiting) -> None:
    wid = waiting["message"]
    wfctl.send(dsn, wid, "other", {"not": "this one"})
    out = show(cli, dsn, wid)
    assert line_of(out, "status") == "status           waiting"
    assert line_of(out, "waiting for").endswith(
        "a message on 'approval' (1 unconsumed message on other topics)"
    )
    assert re.search(r"time left +5\dm\d\ds \(until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)", out), out
    assert "Events" in out and "https://pay.example/" in out
    topics = next(line for line in out.splitlines() if "│ other" in line)
    assert re.search(r"│ other +│ +1 │ +0 │", topics), topics

    data = show_json(cli, dsn, wid)
    found = data["workflow"]["waiting_for"]
    assert {k: found[k] for k in ("kind", "state", "topic", "remaining", "total")} == {
        "kind": "message",
        "state": "waiting",
        "topic": "approval",
        "remaining": None,
        "total": None,
    }
    assert found["until"] is not None and 3000 < found["seconds_left"] <= 3600
    assert data["workflow"]["parent_id"] is None and data["workflow"]["deadline_at"] is None
    assert [(e["key"], e["value"]) for e in data["events"]] == [
        ("link", {"url": f"https://pay.example/{wid}"})
    ]
    assert data["message_topics"] == [
        {"topic": "other", "unconsumed": 1, "consumed": 0, "last_sent_at": data["messages"][0]["created_at"]}
    ]
    assert [(m["topic"], m["consumed_at"]) for m in data["messages"]] == [("other", None)]
    assert data["children"] == [] and data["children_by_status"] == {}

    # the message comes: it is consumed, and show no longer says it waits
    wfctl.send(dsn, wid, "approval", "yes")
    assert wfctl.result(dsn, wid, timeout=30) == {"decision": "yes"}
    done = show_json(cli, dsn, wid)
    assert done["workflow"]["waiting_for"] is None and done["workflow"]["status"] == "completed"
    assert {t["topic"]: (t["unconsumed"], t["consumed"]) for t in done["message_topics"]} == {
        "approval": (0, 1),
        "other": (1, 0),
    }
    assert "waiting for" not in show(cli, dsn, wid)


def test_show_of_a_wait_without_a_timeout(cli, dsn: str, workers) -> None:
    workers.start("--types", SERVED, app=APP)
    wid = wfctl.submit(dsn, "approval", {})
    wait_for(lambda: parked(dsn, wid, "message"), what="the approval to park")
    out = show(cli, dsn, wid)
    assert line_of(out, "time left").endswith("no timeout")
    assert line_of(out, "run at").endswith("when woken (no timeout)")  # not the year 9999
    found = show_json(cli, dsn, wid)["workflow"]["waiting_for"]
    assert (found["kind"], found["until"], found["seconds_left"]) == ("message", None, None)


def test_show_of_a_parent_waiting_for_children(cli, dsn: str, waiting) -> None:
    fan = waiting["fan"]
    out = show(cli, dsn, fan)
    assert line_of(out, "waiting for").endswith("15 of 20 child workflows")
    assert line_of(out, "time left").endswith("no timeout")
    assert line_of(out, "children").endswith("20: 15 pending, 5 completed")
    assert "Children (the first 10 of 20; --json lists all)" in out
    children = rows(dsn, "SELECT id, status FROM workflows WHERE parent_id = %s ORDER BY created_at, id", fan)
    listed = [line for line in out.splitlines() if any(str(c) in line for c, _ in children)]
    assert len(listed) == 10
    assert all(str(c) in line for (c, _), line in zip(children, listed, strict=False))

    data = show_json(cli, dsn, fan)
    found = data["workflow"]["waiting_for"]
    assert (found["kind"], found["remaining"], found["total"], found["until"]) == ("children", 15, 20, None)
    assert data["children"] == [
        {
            "id": str(c),
            "workflow_type": "quick" if s == "completed" else "idle",
            "status": s,
        }
        for c, s in children
    ]
    assert data["children_by_status"] == {"pending": 15, "completed": 5}

    child = children[-1][0]
    assert line_of(show(cli, dsn, child), "parent").endswith(str(fan))
    assert show_json(cli, dsn, child)["workflow"]["parent_id"] == str(fan)


def test_show_of_a_sleep_with_a_deadline(cli, dsn: str, waiting) -> None:
    nap = waiting["nap"]
    out = show(cli, dsn, nap)
    assert line_of(out, "waiting for").endswith("a sleep")
    assert re.search(r"time left +5\dm\d\ds \(until ", out), out
    assert re.search(r"deadline +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(1h5\dm left\)", out), out
    workflow_row = show_json(cli, dsn, nap)["workflow"]
    assert workflow_row["waiting_for"]["kind"] == "sleep"
    assert 3000 < workflow_row["waiting_for"]["seconds_left"] <= 3600
    assert workflow_row["deadline_at"] is not None and 6600 < workflow_row["deadline_seconds_left"] <= 7200
    assert workflow_row["deadline_error"] == "timed out after 2h"


def test_a_woken_workflow_is_no_longer_waiting_but_backlog(cli, dsn: str, workers) -> None:
    """A message came while no worker runs: the run is due (pending, woken), not waiting."""
    proc = workers.start("--types", SERVED, app=APP)
    wid = wfctl.submit(dsn, "approval", {})
    wait_for(lambda: parked(dsn, wid, "message"), what="the approval to park")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    wfctl.send(dsn, wid, "approval", "late")
    assert rows(dsn, "SELECT status, wait_kind, run_at <= now() FROM workflows WHERE id = %s", wid) == [
        ("pending", "message", True)
    ]
    out = show(cli, dsn, wid)
    assert line_of(out, "status").endswith("pending (woken)")
    assert line_of(out, "waiting for").endswith("a worker: woken from its wait for a message on 'approval'")
    assert show_json(cli, dsn, wid)["workflow"]["waiting_for"]["state"] == "woken"
    assert json.loads(cli("list", "--waiting", "--json", "--dsn", dsn).stdout) == []
    rate = json.loads(cli("stats", "--json", "--dsn", dsn).stdout)["success_rate"]
    assert [(r["workflow_type"], r["pending"], r["waiting"]) for r in rate] == [("approval", 1, 0)]
    workers.start("--types", SERVED, app=APP)
    assert wfctl.result(dsn, wid, timeout=30) == {"decision": "late"}


def test_list_waiting_shows_only_parked_workflows_and_what_they_wait_for(cli, dsn: str, waiting) -> None:
    result = cli("list", "--waiting", "--json", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    listed = {r["id"]: r for r in json.loads(result.stdout)}
    ids = {str(waiting[k]): k for k in ("message", "fan", "nap")}
    assert set(listed) == set(ids)  # not the 15 pending idle children
    kinds = {ids[i]: (r["status"], r["waiting_for"]["kind"]) for i, r in listed.items()}
    assert kinds == {
        "message": ("pending", "message"),
        "fan": ("pending", "children"),
        "nap": ("pending", "sleep"),
    }
    assert listed[str(waiting["fan"])]["waiting_for"]["remaining"] == 15
    assert not any(r["no_live_worker"] for r in listed.values())

    table = cli("list", "--waiting", "--dsn", dsn)
    assert table.exit_code == 0 and table.stderr == ""
    lines = {k: next(line for line in table.stdout.splitlines() if i in line) for i, k in ids.items()}
    assert "a message on 'approval'" in lines["message"] and "(until " in lines["message"]
    assert "15 of 20 child workflows" in lines["fan"] and "no timeout" in lines["fan"]
    assert "a sleep" in lines["nap"] and "(until " in lines["nap"]
    assert "waiting for" in table.stdout.splitlines()[1] and "time left" in table.stdout.splitlines()[1]

    # the whole list: parked ones read "waiting", the idle children "pending (no live worker)"
    everything = cli("list", "--limit", "100", "--dsn", dsn).stdout
    assert all(re.search(r"│ waiting +│", next(x for x in everything.splitlines() if i in x)) for i in ids)
    idle = rows(dsn, "SELECT id FROM workflows WHERE workflow_type = 'idle' LIMIT 1")[0][0]
    assert "pending (no live worker)" in next(x for x in everything.splitlines() if str(idle) in x)
    # --status pending still means the stored status: the parked ones and the queued ones
    pending = json.loads(cli("list", "--status", "pending", "--limit", "100", "--json", "--dsn", dsn).stdout)
    assert len(pending) == 3 + 15
    only_fans = json.loads(cli("list", "--waiting", "--type", "fan", "--json", "--dsn", dsn).stdout)
    assert [r["id"] for r in only_fans] == [str(waiting["fan"])]


def test_stats_never_reports_a_waiting_workflow_as_stuck(cli, dsn: str, workers, waiting) -> None:
    """Parked for two days by a worker that is dead now: still waiting, not stuck, not backlog;
    a run held in a step by that worker is stuck (what makes this test able to fail)."""
    workers.gate.touch()
    held = wfctl.submit(dsn, "held", {})
    wait_for(lambda: (str(held), "hold") in workers.effects(), what="the held step to start")
    waiting["worker"].kill()
    waiting["worker"].wait(timeout=10)
    parked_ids = [waiting[k] for k in ("message", "fan", "nap")]
    rows(
        dsn,
        "UPDATE workflows SET updated_at = now() - interval '2 days' WHERE id = ANY(%s) RETURNING id",
        parked_ids,
    )

    def stuck() -> list[str]:
        result = cli("stats", "--stale", "1s", "--json", "--dsn", dsn)
        assert result.exit_code == 0, result.output
        return [r["id"] for r in json.loads(result.stdout)["stuck"]]

    assert wait_for(stuck, what="the held run to count as stuck") == [str(held)]
    data = json.loads(cli("stats", "--stale", "1s", "--json", "--dsn", dsn).stdout)
    by_type = {r["workflow_type"]: r for r in data["success_rate"]}
    for kind in ("approval", "fan", "nap"):
        assert (by_type[kind]["pending"], by_type[kind]["waiting"], by_type[kind]["no_live_worker"]) == (
            0,
            1,
            False,
        )
    assert (by_type["idle"]["pending"], by_type["idle"]["waiting"]) == (16, 0)  # 15 + held's child

    text = cli("stats", "--stale", "1s", "--dsn", dsn)
    assert text.exit_code == 0, text.output
    header = next(line for line in text.stdout.splitlines() if "pending" in line)
    assert re.search(r"pending ┃ waiting ┃ cancelled", header), header
    approval = next(line for line in text.stdout.splitlines() if "│ approval" in line)
    assert re.search(r"│ +0 │ +1 │ +0 │", approval), approval  # pending 0, waiting 1, cancelled 0
    stuck_rows = [line for line in text.stdout.splitlines() if any(str(p) in line for p in parked_ids)]
    assert stuck_rows == []
    assert "'approval'" not in text.stderr and "'fan'" not in text.stderr and "'nap'" not in text.stderr


_WAITING = re.compile(r'^wfctl_workflows_waiting\{workflow_type="([^"]*)",kind="([^"]*)"\} (\S+)$', re.M)


def test_metrics_gauge_of_waiting_workflows(cli, dsn: str, waiting) -> None:
    result = cli("metrics", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "# TYPE wfctl_workflows_waiting gauge" in result.stdout
    gauge = {(t, k): float(v) for t, k, v in _WAITING.findall(result.stdout)}
    types = {"approval", "quick", "fan", "nap", "idle"}
    assert set(gauge) == {(t, k) for t in types for k in ("sleep", "message", "children")}
    assert {key: v for key, v in gauge.items() if v} == {
        ("approval", "message"): 1,
        ("fan", "children"): 1,
        ("nap", "sleep"): 1,
    }
    # still pending in wfctl_workflows, and not runnable
    assert 'wfctl_workflows{workflow_type="nap",status="pending"} 1' in result.stdout
    assert "wfctl_workflows_runnable 15\n" in result.stdout  # the idle children only


def family_started(dsn: str, workers, wid: uuid.UUID) -> bool:
    """The parent parked on its 3 children, its ``held`` child running in the gated step."""
    held = rows(dsn, "SELECT id FROM workflows WHERE parent_id = %s AND workflow_type = 'held'", wid)
    return (
        parked(dsn, wid, "children", 3)
        and bool(held)
        and (str(held[0][0]), "hold") in workers.effects()
        and state(dsn, held[0][0])[0] == "running"
    )


def test_cancel_of_a_parent_cancels_its_pending_and_running_descendants(cli, dsn: str, workers) -> None:
    workers.gate.touch()
    proc = workers.start("--types", SERVED, app=APP)
    first = wfctl.submit(dsn, "family", {})
    second = wfctl.submit(dsn, "family", {})
    for wid in (first, second):
        wait_for(lambda w=wid: family_started(dsn, workers, w), what="the family to wait on its children")

    result = cli("cancel", str(first), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"wfctl: cancelled {first} (it was pending) and 4 unfinished descendants (3 pending, 1 running): "
        "their workers stop the running ones at their next step boundary and commit nothing more for them\n"
    )
    tree = rows(
        dsn,
        "WITH RECURSIVE t AS (SELECT id FROM workflows WHERE id = %s"
        " UNION SELECT w.id FROM workflows w JOIN t ON w.parent_id = t.id)"
        " SELECT w.status, count(*) FROM workflows w JOIN t USING (id) GROUP BY 1",
        first,
    )
    assert tree == [("cancelled", 5)]
    assert state(dsn, second)[0] == "pending"  # the other family is untouched

    data = json.loads(cli("cancel", str(second), "--json", "--dsn", dsn).stdout)
    assert (data["id"], data["previous_status"], data["worker"] is not None) == (str(second), "pending", True)
    got = sorted((d["depth"], d["previous_status"]) for d in data["descendants"])
    assert got == [(1, "pending"), (1, "pending"), (1, "running"), (2, "pending")]
    running = next(d for d in data["descendants"] if d["previous_status"] == "running")
    assert running["worker"] is not None and uuid.UUID(running["id"])

    # the running descendants' worker commits nothing more for them
    workers.gate.unlink()
    wait_for(lambda: proc.log_path.read_text().count("lease lost (") == 2, what="the worker to drop both")
    assert rows(dsn, "SELECT DISTINCT status FROM workflows") == [("cancelled",)]
    assert rows(dsn, "SELECT count(*) FROM workflow_steps WHERE step_name = 'hold'") == [(0,)]
