"""`wfctl metrics` gives series of their own to at most --max-types workflow types (100 by
default), those with the most workflows; the others are summed under workflow_type="(other)".
Whoever can submit (wfctl_submit from SQL) can create any number of types: without the cap,
each one would add five wfctl_workflows series and three wfctl_workflows_waiting series."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import parser
from report_rows import db_now, runner, step, workflow

OTHER = "(other)"


def series(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Each family's samples by their sorted labels."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def types_in(samples: dict[tuple[tuple[str, str], ...], float]) -> set[str]:
    return {dict(labels)["workflow_type"] for labels in samples}


def by_type(samples: dict[tuple[tuple[str, str], ...], float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for labels, value in samples.items():
        kind = dict(labels)["workflow_type"]
        totals[kind] = totals.get(kind, 0) + value
    return totals


def test_types_beyond_the_cap_are_summed_under_other(clean_env, dsn, conn):
    # 150 types of one workflow each, submitted as any SQL client may; "busy" has the most,
    # "second" the next most, and one type is called "(other)" itself
    conn.execute("SELECT wfctl_submit('flood-' || lpad(g::text, 3, '0')) FROM generate_series(1, 150) g")
    conn.execute("SELECT wfctl_submit('busy') FROM generate_series(1, 5)")
    conn.execute("SELECT wfctl_submit('second') FROM generate_series(1, 3)")
    conn.execute("SELECT wfctl_submit(%s)", (OTHER,))
    parked = conn.execute(  # a waiting run of a folded type
        "UPDATE workflows SET wait_kind = 'sleep', run_at = now() + interval '1 hour' "
        "WHERE workflow_type = 'flood-150' RETURNING id"
    ).fetchone()
    assert parked is not None
    now = db_now(conn)
    done = workflow(conn, now, workflow_type="flood-150", status="completed", age=timedelta(minutes=5))
    step(conn, done, 1, "charge", start=now - timedelta(minutes=4), seconds=2)

    default = runner()("metrics", "--dsn", dsn)
    assert default.exit_code == 0, default.output
    found = series(default.stdout)
    counts = found["wfctl_workflows"]
    assert len(types_in(counts)) == 101  # 100 types and (other)
    totals = by_type(counts)
    assert totals["busy"] == 5 and totals["second"] == 3
    assert sum(totals.values()) == 150 + 5 + 3 + 1 + 1  # every workflow counted once
    assert totals[OTHER] == 52 + 1  # 53 of the 152 types (flood-150 has two runs: kept)
    assert found["wfctl_workflow_types_other"][()] == 153 - 100
    assert types_in(found["wfctl_workflows_waiting"]) == types_in(counts)

    capped = runner()("metrics", "--dsn", dsn, "--max-types", "2")
    assert capped.exit_code == 0, capped.output
    found = series(capped.stdout)
    assert by_type(found["wfctl_workflows"]) == {"busy": 5, "second": 3, OTHER: 150 + 1 + 1}
    assert found["wfctl_workflow_types_other"][()] == 151
    waiting = found["wfctl_workflows_waiting"]
    assert types_in(waiting) == {"busy", "second", OTHER}
    assert waiting[(("kind", "sleep"), ("workflow_type", OTHER))] == 1
    steps = found["wfctl_step_duration_window_steps"]
    assert steps == {(("step_name", "charge"), ("workflow_type", OTHER)): 1}


def test_max_types_must_not_be_negative(clean_env, dsn):
    result = runner()("metrics", "--dsn", dsn, "--max-types", "-1")
    assert result.exit_code == 2
    assert "--max-types" in result.stderr and len(result.stderr.strip().splitlines()) == 1
