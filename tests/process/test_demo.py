"""`wfctl demo` tells its story on a real database: a retry, a SIGKILL, a recovery, a fan-out to
child workflows joined by a parked parent, an approval sent with `wfctl send`, stats."""

from __future__ import annotations

import re

import psycopg


def test_demo_runs_everything_to_completion(run_wfctl, empty_dsn):
    result = run_wfctl("demo", "--orders", "6", "--dsn", empty_dsn, timeout=120)
    assert result.exit_code == 0, result.output
    crashed = re.search(r"killed worker 1 with SIGKILL while order (\S+)", result.stderr).group(1)
    flaky = re.search(r"submitted order (\S+), whose mail server", result.stderr).group(1)
    bulk = re.search(r"submitted bulk order (\S+):", result.stderr).group(1)
    assert "requeued" in result.stderr and "Success rate" in result.stdout
    assert "Slowest steps" in result.stdout
    # the demo ran the command a user would, and shows it with what it printed
    approval = """'{"approved_by": "manager"}'"""
    assert f"sent the approval: wfctl send {bulk} approval {approval}" in result.stderr
    assert re.search(rf"sent message \d+ to {bulk} on 'approval'", result.stderr)
    assert f"wfctl show {bulk}" in result.stderr
    with psycopg.connect(empty_dsn) as conn:
        statuses = conn.execute(
            "SELECT workflow_type, status, count(*) FROM workflows GROUP BY 1, 2 ORDER BY 1"
        ).fetchall()
        assert statuses == [
            ("demo-bulk-order", "completed", 1),
            ("demo-order", "completed", 8),
            ("demo-stock-check", "completed", 10),
        ]
        # the crashed order resumed after its checkpoints: 'charge' ran in the first attempt only
        steps = conn.execute(
            "SELECT step_name, attempt FROM workflow_steps WHERE workflow_id = %s ORDER BY step_number",
            (crashed,),
        ).fetchall()
        assert steps[0] == ("charge", 1) and steps[-1][0] == "email" and steps[-1][1] >= 2
        assert conn.execute("SELECT attempt FROM workflows WHERE id = %s", (flaky,)).fetchone() == (2,)

        # the fan-out: ten children of the bulk order, then one join over their outputs
        children = conn.execute(
            "SELECT output_data->>'warehouse', (output_data->>'units')::int FROM workflows"
            " WHERE parent_id = %s",
            (bulk,),
        ).fetchall()
        assert len({warehouse for warehouse, _ in children}) == 10
        ((output,),) = conn.execute("SELECT output_data FROM workflows WHERE id = %s", (bulk,)).fetchall()
        assert output["approved_by"] == "manager"
        assert output["units_in_stock"] == sum(units for _, units in children)
        names = [
            name
            for (name,) in conn.execute(
                "SELECT step_name FROM workflow_steps WHERE workflow_id = %s ORDER BY step_number", (bulk,)
            )
        ]
        assert names == [
            "start_children:demo-stock-check",
            "wait",
            "set_event:stock",
            "recv:approval",
            "charge",
            "ship",
        ]
        # the approval was consumed once, by the recv step, and the bulk order was parked while it
        # waited for it: the execution that took it is not the one that set the event
        assert conn.execute(
            "SELECT topic, payload, consumed_step FROM workflow_messages WHERE workflow_id = %s", (bulk,)
        ).fetchall() == [("approval", {"approved_by": "manager"}, 4)]
        epochs = dict(
            conn.execute(
                "SELECT step_name, lease_epoch FROM workflow_steps WHERE workflow_id = %s"
                " AND step_name IN ('set_event:stock', 'recv:approval')",
                (bulk,),
            ).fetchall()
        )
        assert epochs["recv:approval"] > epochs["set_event:stock"]
        # parked for the approval, and at most once more for the children: never woken per child
        outcomes = [
            outcome
            for (outcome,) in conn.execute(
                "SELECT outcome FROM workflow_attempts WHERE workflow_id = %s ORDER BY lease_epoch", (bulk,)
            )
        ]
        assert outcomes in (["parked", "parked", "completed"], ["parked", "completed"]), outcomes
        parks = outcomes.count("parked")
        woke = "the last one to finish woke it, once" if parks == 2 else "they were all done before"
        assert woke in result.stderr
