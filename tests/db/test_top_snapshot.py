"""`wfctl top`'s snapshot (wfctl/top/snapshot.py) read from a database with runs in every state
(tests/support/top.py): what each pane gets, with and without a type filter."""

from __future__ import annotations

from support.top import DEAD, LIVE, STOPPED, seed

from wfctl.operations import WAIT_KINDS
from wfctl.top.snapshot import BUCKETS, PARKED_KINDS, take


def test_the_snapshot_counts_each_state_per_type_and_the_last_ten_minutes_of_completions(conn):
    seeded = seed(conn)
    snap = take(conn)
    by_type = {t.workflow_type: t for t in snap.types}
    assert sorted(by_type) == ["mail", "order"]
    order = by_type["order"]
    assert (order.running, order.pending, order.failed) == (2, 1, 1)
    assert dict(order.parked) == {"sleep": 1, "message": 1, "children": 1}
    # two finished in the last ten seconds (the last bar), one 65 s ago; the one 20 min ago is out
    assert order.completions[-1] == 2
    assert order.completions[BUCKETS - 1 - 6] == 1
    assert sum(order.completions) == 3
    assert order.per_second == 0.2
    mail = by_type["mail"]
    assert (mail.running, mail.pending, mail.completions[-1]) == (0, 1, 1)
    assert snap.per_second == 0.3
    assert [str(r["id"]) for r in snap.stuck] == [str(seeded.stuck)]
    assert {w["id"]: w["state"] for w in snap.workers} == {LIVE: "live", DEAD: "dead", STOPPED: "stopped"}
    assert [(row.workflow_type, row.effective().concurrency) for row in snap.limits] == [("order", 1)]
    assert [str(r["id"]) for r in snap.failures] == [str(seeded.failed)]
    assert {(r["workflow_type"], r["step_name"]) for r in snap.slow_steps} == {
        ("order", "charge"),
        ("mail", "charge"),
    }
    assert snap.replica is None
    standby = take(conn, standby=True).replica
    assert standby is not None and standby.standby is False  # the test server is a primary


def test_a_type_filter_narrows_every_pane_to_that_type(conn):
    seed(conn)
    snap = take(conn, workflow_type="mail")
    assert [t.workflow_type for t in snap.types] == ["mail"]
    assert snap.stuck == [] and snap.failures == [] and snap.limits == []
    assert {r["workflow_type"] for r in snap.slow_steps} == {"mail"}
    assert len(snap.workers) == 3  # workers run every type


def test_the_parked_columns_are_the_wait_kinds():
    assert tuple(kind.value for kind in WAIT_KINDS) == PARKED_KINDS
