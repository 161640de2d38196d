"""`wfctl metrics`: the Prometheus text format, as node_exporter's textfile collector reads it."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from report_rows import db_now, runner, step, worker, workflow

from wfctl import prometheus
from wfctl.prometheus import Family, Sample

QUANTILES = "wfctl_step_duration_window_seconds"
SUM = "wfctl_step_duration_window_sum_seconds"
STEPS = "wfctl_step_duration_window_steps"

# A sample line: name, optional {labels} with escaped values, a value.
_LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(
    rf"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{{[a-zA-Z_][a-zA-Z0-9_]*={_LABEL_VALUE}"
    rf"(?:,[a-zA-Z_][a-zA-Z0-9_]*={_LABEL_VALUE})*\}})? (\S+)$"
)
_PAIR = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({_LABEL_VALUE})")
# Besides the line feed that ends each line, no control character may be in the file: the format
# has no escape for them, and a CR (or VT, FF, NEL ...) ends a line for many readers.
_RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), quoted[1:-1])


def parse(text: str) -> dict[str, dict]:
    """A strict reader of the exposition format: HELP and TYPE before the samples of each family,
    every line well formed (lines end at a line feed only, and nothing else is a control
    character), every value a float, no series twice. Returns {family: {type, help, samples}}."""
    assert text.endswith("\n")
    assert not _RAW_CONTROL.findall(text), f"raw control characters: {_RAW_CONTROL.findall(text)!r}"
    families: dict[str, dict] = {}
    series: set[tuple[str, frozenset]] = set()
    current: str | None = None
    for line in text[:-1].split("\n"):
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
            # an empty label value is the same as no label: the series Prometheus would store
            key = (name, frozenset((k, v) for k, v in pairs.items() if v != ""))
            assert key not in series, f"duplicate series {line!r}"
            series.add(key)
            families[current]["samples"].append((name, pairs, float(value)))
    return families


def values_of(families: dict[str, dict]) -> dict[str, dict[tuple, float]]:
    return {
        name: {tuple(sorted(labels.items())): value for _, labels, value in family["samples"]}
        for name, family in families.items()
    }


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


def test_control_characters_get_stand_ins_and_series_stay_distinct():
    written = prometheus.escape_label_value("a\rb\x1b\x85\x7f\x00\tc\nd")
    assert written == "a\u240db\u241b\ufffd\u2421\u2400\u2409c\\nd"
    assert prometheus.escape_help("x\ry") == "x\u240dy"
    # the database's translate() gets the same table (NUL apart: text never holds it)
    table = prometheus.label_translation()
    assert len(table["controls"]) == len(table["pictures"]) == 31 + 1 + 32 - 1
    assert "".join(map(prometheus.label_value, table["controls"])) == table["pictures"]
    # a series written twice (here: an empty label value is no label) is refused
    with pytest.raises(ValueError, match="two samples of the series"):
        Family("x", "gauge", "", (Sample(1, {"step": ""}), Sample(2, {})))
    with pytest.raises(ValueError, match="two samples of the series"):
        Family("x", "gauge", "", (Sample(1, {"t": "a\r"}), Sample(2, {"t": "a\u240d"})))
    Family("x", "summary", "", (Sample(1, {"t": "a"}), Sample(2, {"t": "a"}, "_sum")))  # distinct


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
    values = values_of(families)
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
    # the step numbers cover a sliding window: gauges, named so (no summary whose _count and
    # _sum would go down as steps leave the window)
    charge = (("step_name", "charge"), ("workflow_type", "order"))
    for name in (QUANTILES, SUM, STEPS):
        assert families[name]["type"] == "gauge" and "last 1h" in families[name]["help"]
    assert values[QUANTILES][(("quantile", "0.5"), *charge)] == 2.0
    assert values[QUANTILES][(("quantile", "0.95"), *charge)] == 2.0
    assert values[SUM][charge] == 6.0
    assert values[STEPS][charge] == 3
    wide = values_of(parse(runner()("metrics", "--dsn", dsn, "--since", "3d").stdout))
    assert wide[STEPS][charge] == 4


def test_metrics_on_an_empty_database(clean_env, dsn):
    result = runner()("metrics", "--dsn", dsn)
    assert result.exit_code == 0 and result.stderr == ""
    families = parse(result.stdout)
    assert families["wfctl_workflows"]["samples"] == []
    assert families["wfctl_workflows_stuck"]["samples"] == [("wfctl_workflows_stuck", {}, 0.0)]
    assert families["wfctl_oldest_pending_age_seconds"]["samples"][0][2] == 0.0
    data = json.loads(runner()("metrics", "--dsn", dsn, "--json").stdout)
    assert [f["name"] for f in data][:2] == ["wfctl_workflows", "wfctl_workflows_running"]


# Stored strings the exposition format cannot carry as they are: each must still give one valid,
# distinct series. "pic\u240d" is what "pic\r" is written as, so the two are one series.
HOSTILE_TYPES = [
    "cr\rtype",
    "crlf\r\ntype",
    "lf\ntype",
    'quote"back\\slash',
    "esc\x1b[2J\x1b]0;title\x07",
    "c1\x9b\x85",
    "vt\x0bff\x0cfs\x1c",
    "del\x7f",
    "ls\u2028ps\u2029",
    "pic\u240d",
    "pic\r",
]


@pytest.fixture
def hostile_metrics(clean_env, dsn, conn) -> str:
    now = db_now(conn)
    start = now - timedelta(minutes=20)
    for kind in HOSTILE_TYPES:
        wid = workflow(conn, now, workflow_type=kind, age=timedelta(minutes=30))
        step(conn, wid, 1, kind, start=start, seconds=1)
    # one type whose steps have no name (NULL) and an empty name: both are step_name=""
    for number, name in enumerate([None, "", None, "s\r", "s\u240d"], start=1):
        wid = workflow(conn, now, workflow_type="unnamed", age=timedelta(minutes=30))
        step(conn, wid, number, name, start=start, seconds=number)
    result = runner()("metrics", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_metrics_are_valid_and_distinct_for_any_stored_data(hostile_metrics):
    families = parse(hostile_metrics)  # no raw control character, no duplicate series
    values = values_of(families)
    completed = {
        dict(labels)["workflow_type"]: value
        for labels, value in values["wfctl_workflows"].items()
        if dict(labels)["status"] == "completed"
    }
    assert completed["lf\ntype"] == 1  # a line feed has its escape: read back unchanged
    assert completed['quote"back\\slash'] == 1
    assert completed["cr\u240dtype"] == 1  # a CR is written as its control picture
    assert completed["esc\u241b[2J\u241b]0;title\u2407"] == 1
    assert completed["c1\ufffd\ufffd"] == 1  # C1 controls have no picture
    assert completed["pic\u240d"] == 2  # "pic\r" and "pic\u240d": one series, counted together
    assert completed["ls\u2028ps\u2029"] == 1  # not control characters: kept
    unnamed = {
        dict(labels)["step_name"]: value
        for labels, value in values[STEPS].items()
        if dict(labels)["workflow_type"] == "unnamed"
    }
    assert unnamed == {"": 3, "s\u240d": 2}  # NULL, "" and "" ; "s\r" and "s\u240d"
    merged = values[SUM][(("step_name", ""), ("workflow_type", "unnamed"))]
    assert merged == 1 + 2 + 3


def test_metrics_parse_with_the_prometheus_client_parser(hostile_metrics):
    parser = pytest.importorskip("prometheus_client.parser")
    ours = values_of(parse(hostile_metrics))
    theirs: dict[str, dict[tuple, float]] = {}
    for family in parser.text_string_to_metric_families(hostile_metrics):
        for sample in family.samples:
            series = theirs.setdefault(sample.name, {})
            key = tuple(sorted(sample.labels.items()))
            assert key not in series, f"duplicate series {sample}"
            series[key] = sample.value
    assert theirs == ours


def test_window_numbers_are_gauges_named_so(clean_env, dsn, conn):
    """What can go down between two scrapes is a gauge: rate() on a counter or a summary's _count
    that shrank as steps left the window would be wrong."""
    now = db_now(conn)
    for minutes in (50, 40, 10):
        done = workflow(conn, now, age=timedelta(minutes=minutes))
        step(conn, done, 1, "charge", start=now - timedelta(minutes=minutes - 1), seconds=2)
    before = parse(runner()("metrics", "--dsn", dsn).stdout)
    conn.execute("UPDATE workflows SET created_at = created_at - interval '25 minutes'")  # two leave
    after = parse(runner()("metrics", "--dsn", dsn).stdout)
    old, new = values_of(before), values_of(after)
    went_down = {
        name
        for name, series in old.items()
        for key, value in series.items()
        if new.get(name, {}).get(key, 0) < value
    }
    assert {SUM, STEPS} <= went_down
    for name in went_down:
        assert after[name]["type"] == "gauge", name
    assert not [name for name, family in after.items() if family["type"] in ("counter", "summary")]
    assert new[STEPS][(("step_name", "charge"), ("workflow_type", "order"))] == 1
