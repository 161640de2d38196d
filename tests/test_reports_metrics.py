"""`wfctl metrics`: the Prometheus text format, as node_exporter's textfile collector reads it."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from report_rows import db_now, runner, step, worker, workflow

from wfctl import prometheus
from wfctl.prometheus import Family, Sample

# A sample line: name, optional {labels} with escaped values, a value.
_LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(
    rf"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{{[a-zA-Z_][a-zA-Z0-9_]*={_LABEL_VALUE}"
    rf"(?:,[a-zA-Z_][a-zA-Z0-9_]*={_LABEL_VALUE})*\}})? (\S+)$"
)
_PAIR = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({_LABEL_VALUE})")


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), quoted[1:-1])


def parse(text: str) -> dict[str, dict]:
    """A strict reader of the exposition format: HELP and TYPE before the samples of each family,
    every line well formed, every value a float. Returns {family: {type, help, samples}}."""
    assert text.endswith("\n")
    families: dict[str, dict] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in families, f"family {name} appears twice"
            families[name] = {"help": help_text, "type": None, "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name == current and kind in prometheus.TYPES
            families[name]["type"] = kind
        else:
            match = _SAMPLE.match(line)
            assert match, f"malformed line {line!r}"
            name, labels, value = match.groups()
            assert current is not None and families[current]["type"] is not None
            assert name == current or (
                families[current]["type"] == "summary" and name in (current + "_sum", current + "_count")
            ), f"{name} outside its family {current}"
            float(value)  # NaN, +Inf, -Inf parse too
            pairs = {k: _unescape(v) for k, v in _PAIR.findall(labels or "")}
            families[current]["samples"].append((name, pairs, float(value)))
    return families


def test_escaping_and_value_format():
    assert prometheus.escape_label_value('a "b" \\ c\nd') == 'a \\"b\\" \\\\ c\\nd'
    assert prometheus.escape_help("x\\y\nz") == "x\\\\y\\nz"
    assert [prometheus.format_value(v) for v in (3, 2.0, 0.25, float("nan"), float("inf"))] == [
        "3",
        "2",
        "0.25",
        "NaN",
        "+Inf",
    ]
    text = prometheus.exposition([Family("x_total", "counter", 'with "quotes"', (Sample(1, {"t": 'q"\\'}),))])
    assert text == '# HELP x_total with "quotes"\n# TYPE x_total counter\nx_total{t="q\\"\\\\"} 1\n'
    assert parse(text)["x_total"]["samples"] == [("x_total", {"t": 'q"\\'}, 1.0)]
    with pytest.raises(ValueError):
        Family("bad-name", "gauge", "", ())
    with pytest.raises(ValueError):
        Family("ok", "gauge", "", (Sample(1, {"bad-label": "x"}),))


def test_metrics_exposition(clean_env, dsn, conn):
    now = db_now(conn)
    weird = 'legacy "etl"\\import\nv2'
    worker(conn, now, "live:1:a")
    worker(conn, now, "dead:2:b", silent=timedelta(minutes=30))
    worker(conn, now, "stopped:3:c", stopped=True)
    for _ in range(3):
        done = workflow(conn, now, status="completed", age=timedelta(minutes=30))
        step(conn, done, 1, "charge", start=now - timedelta(minutes=29), seconds=2)
    workflow(conn, now, status="running", lease_owner="live:1:a")
    workflow(conn, now, status="running", lease_owner="dead:2:b")  # stuck
    workflow(conn, now, workflow_type=weird, status="pending", age=timedelta(minutes=7))
    workflow(conn, now, status="pending", run_at=now + timedelta(hours=1))  # delayed: not waiting yet
    old = workflow(conn, now, status="completed", age=timedelta(days=2))
    step(conn, old, 1, "charge", start=now - timedelta(days=2), seconds=100)  # outside --since

    result = runner()("metrics", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    families = parse(result.stdout)
    values = {
        name: {tuple(sorted(labels.items())): value for _, labels, value in family["samples"]}
        for name, family in families.items()
    }
    assert families["wfctl_workflows"]["type"] == "gauge"
    workflows = values["wfctl_workflows"]
    assert workflows[(("status", "completed"), ("workflow_type", "order"))] == 4
    assert workflows[(("status", "pending"), ("workflow_type", "order"))] == 1
    assert workflows[(("status", "failed"), ("workflow_type", "order"))] == 0  # zeros are explicit
    assert workflows[(("status", "pending"), ("workflow_type", weird))] == 1  # escaped, read back
    assert values["wfctl_workflows_running"][()] == 2
    assert values["wfctl_workflows_stuck"][()] == 1
    assert values["wfctl_workflows_runnable"][()] == 1
    assert 7 * 60 <= values["wfctl_oldest_pending_age_seconds"][()] < 8 * 60
    assert values["wfctl_workers"] == {
        (("state", "live"),): 1,
        (("state", "dead"),): 1,
        (("state", "stopped"),): 1,
    }
    summary = families["wfctl_step_duration_seconds"]
    assert summary["type"] == "summary"
    by_name = {(name, labels.get("quantile")): value for name, labels, value in summary["samples"]}
    assert by_name[("wfctl_step_duration_seconds", "0.5")] == 2.0
    assert by_name[("wfctl_step_duration_seconds", "0.95")] == 2.0
    assert by_name[("wfctl_step_duration_seconds_sum", None)] == 6.0
    assert by_name[("wfctl_step_duration_seconds_count", None)] == 3
    wide = parse(runner()("metrics", "--dsn", dsn, "--since", "3d").stdout)["wfctl_step_duration_seconds"]
    assert (
        "wfctl_step_duration_seconds_count",
        {"workflow_type": "order", "step_name": "charge"},
        4.0,
    ) in wide["samples"]


def test_metrics_on_an_empty_database(clean_env, dsn):
    result = runner()("metrics", "--dsn", dsn)
    assert result.exit_code == 0 and result.stderr == ""
    families = parse(result.stdout)
    assert families["wfctl_workflows"]["samples"] == []
    assert families["wfctl_workflows_stuck"]["samples"] == [("wfctl_workflows_stuck", {}, 0.0)]
    assert families["wfctl_oldest_pending_age_seconds"]["samples"][0][2] == 0.0
    data = json.loads(runner()("metrics", "--dsn", dsn, "--json").stdout)
    assert [f["name"] for f in data][:2] == ["wfctl_workflows", "wfctl_workflows_running"]
