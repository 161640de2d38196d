"""Read-only reports: stats, list, show, workers and metrics, as plain rows.

Each function takes a connection and plain values and returns dicts keyed by the SQL column names
of ``sql/queries/reports.sql`` (or dataclasses of them), so that one function serves the Rich
tables, ``--json``, the Prometheus text and the tests. Nothing here prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from wfctl import keys
from wfctl.durations import interval_text
from wfctl.errors import InvalidInput, NotFound
from wfctl.operations import WAIT_KINDS
from wfctl.prometheus import Family, Sample, label_translation
from wfctl.queries import q
from wfctl.waits import WAITING as WAITING_WORD
from wfctl.waits import by_status, is_waiting, waiting_for
from wfctl.words import PENDING, RUNNING, STATUSES, check_status, parse_id

Row = dict[str, Any]
Conn = psycopg.Connection[Any]

#: Worker states of the ``workers`` report.
WORKER_STATES = ("live", "dead", "stopped")
#: The largest ``list --limit``: what SQL's LIMIT (a bigint) takes.
MAX_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class StatsReport:
    as_of: datetime
    since: timedelta
    stale: timedelta | None  # None: each worker judged by its own heartbeat
    workflow_type: str | None
    success_rate: list[Row]  # each with no_live_worker: pending runs no live worker will claim
    stuck: list[Row]
    slow_steps: list[Row]

    @property
    def unserved(self) -> list[Row]:
        """The success-rate rows whose pending workflows no live worker runs."""
        return [r for r in self.success_rate if r["no_live_worker"]]

    @property
    def window_empty(self) -> bool:
        """No workflow was created in the window (there may still be stuck runs, from before)."""
        return not self.success_rate


#: How many of the newest messages ``show`` lists one by one (every topic is counted).
SHOW_MESSAGES = 100


@dataclass(frozen=True)
class WorkflowDetail:
    workflow: Row  # with waiting_for (wfctl.waits), parent_id, the deadline and the concurrency key
    steps: list[Row]
    attempts: list[Row]  # every execution, oldest first (workflow_attempts)
    children: list[Row] = field(default_factory=list)  # every child workflow, oldest first
    events: list[Row] = field(default_factory=list)  # the latest value of each key
    message_topics: list[Row] = field(default_factory=list)  # per topic: unconsumed, consumed
    messages: list[Row] = field(default_factory=list)  # the newest SHOW_MESSAGES, newest first

    @property
    def children_by_status(self) -> dict[str, int]:
        return by_status(self.children)


def _rows(
    conn: Conn,
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    json_loads: Callable[[str | bytes], Any] | None = None,
) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        if json_loads is not None:
            set_json_loads(json_loads, cur)
        cur.execute(q(name), params or {})
        return cur.fetchall()


#: How deep ``show`` draws a stored JSON value that Python cannot read whole (one stored by
#: SQL, nested deeper than the recursion limit): containers below this depth are replaced by a
#: string saying so. wfctl itself refuses inputs nested deeper than validate.MAX_JSON_DEPTH.
SHOW_JSON_DEPTH = 500
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_INT_DIGITS = 4300  # Python's default limit for int(str)


def truncate_json(text: str, depth: int = SHOW_JSON_DEPTH) -> str:
    """JSON text in which every array or object nested deeper than ``depth`` is replaced by a
    string saying so (iterative: works at any depth)."""
    parts: list[str] = []
    pos = level = 0
    skipping = False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        if token in "[{":
            level += 1
            if level == depth + 1 and not skipping:
                parts.append(text[pos : match.start()])
                parts.append(json.dumps(f"... nested deeper than {depth} levels: not shown"))
                skipping = True
        else:
            if level == depth + 1 and skipping:
                pos = match.end()
                skipping = False
            level -= 1
    parts.append(text[pos:])
    return "".join(parts)


def _big_int(digits: str) -> int | str:
    size = len(digits.lstrip("-"))
    if size <= _INT_DIGITS:
        return int(digits)
    return f"{digits[:20]}... (an integer of {size} digits: not shown)"


def _exact_json(data: str | bytes) -> Any:
    """Load a stored JSON value with its fractional numbers as Decimal: ``show`` prints them
    with every digit stored (a float would print 0.12345678901234567890123 as ...568)."""
    return json.loads(data, parse_float=Decimal)


def _readable_json(data: str | bytes) -> Any:
    """Load a stored JSON value for ``show`` when json.loads cannot (too deep, or an integer too
    long for Python) or the value is too deep to draw: parts deeper than SHOW_JSON_DEPTH and
    long integers are replaced by strings saying what was left out."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    return json.loads(truncate_json(text), parse_int=_big_int, parse_float=Decimal)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep in ``value`` (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


@contextmanager
def _snapshot(conn: Conn) -> Iterator[None]:
    """Run the statements of one report in one read-only snapshot (inside the caller's
    transaction when there is one)."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    with conn.transaction():
        conn.execute(q("reports.snapshot"))
        conn.execute(q("reports.no_jit"))
        yield


def _as_of(conn: Conn) -> datetime:
    row = conn.execute(q("reports.as_of")).fetchone()
    assert row is not None
    return cast(datetime, row[0])  # psycopg's rows are untyped: now() is a timestamptz


def _positive(value: timedelta, what: str) -> str:
    """A window or threshold for the SQL of reports.sql (``%(x)s::interval``), as exact seconds:
    a timedelta would be sent as days, which are 23 or 25 hours on a daylight-saving day."""
    if value <= timedelta(0):
        raise InvalidInput(f"{what} must be greater than zero")
    return interval_text(value)


def _threshold(stale: timedelta | None) -> str | None:
    """A ``--stale`` for reports.sql, or None: judge each worker by its own recorded heartbeat
    (its ``dead_after``, the rule of the sweep live workers run)."""
    return None if stale is None else _positive(stale, "the stale threshold")


def stats(
    conn: Conn, *, since: timedelta, stale: timedelta | None = None, workflow_type: str | None = None
) -> StatsReport:
    """Success rate per type and slowest steps over the window, and the stuck runs. Each
    success-rate row says (``no_live_worker``) whether it has pending workflows of a type that
    no live worker runs."""
    window = {"since": _positive(since, "the window"), "workflow_type": workflow_type}
    with _snapshot(conn):
        served = live_types(conn)
        rates = _rows(conn, "reports.success_rate", window)
        for row in rates:
            row["no_live_worker"] = bool(row["pending"]) and row["workflow_type"] not in served
        return StatsReport(
            as_of=_as_of(conn),
            since=since,
            stale=stale,
            workflow_type=workflow_type,
            success_rate=rates,
            stuck=stuck(conn, stale=stale, workflow_type=workflow_type),
            slow_steps=_rows(conn, "reports.slow_steps", window),
        )


def stuck(conn: Conn, *, stale: timedelta | None = None, workflow_type: str | None = None) -> list[Row]:
    """Running workflows whose owner's heartbeat is older than ``stale`` (None: than the owner's
    own ``dead_after``, as the sweep judges it), or whose owner shut down or is unknown."""
    params = {"stale": _threshold(stale), "workflow_type": workflow_type}
    return _rows(conn, "reports.stuck", params)


def live_types(conn: Conn) -> set[str]:
    """The workflow types some live worker runs (live by its own heartbeat)."""
    return {r["workflow_type"] for r in _rows(conn, "reports.live_types")}


def list_workflows(
    conn: Conn,
    *,
    status: str | None = None,
    workflow_type: str | None = None,
    since: timedelta | None = None,
    limit: int = 50,
    waiting: bool = False,
    key_prefix: str | None = None,
) -> list[Row]:
    """Workflows newest first, optionally of some statuses (``list_statuses``) and one type,
    created within ``since``,
    with an idempotency key that starts with ``key_prefix`` (character for character); with
    ``waiting``, only those parked on a wait and not yet due (wfctl.waits). Each row says what
    it waits for (``waiting_for``, None when it is not parked)."""
    params = list_params(
        status=status, workflow_type=workflow_type, since=since, limit=limit, waiting=waiting
    )
    with _snapshot(conn):
        params.update(keys.prefix_params(conn, key_prefix))
        rows = listed(_rows(conn, "reports.list_workflows", params))
        backlog = any(r["status"] == PENDING and not is_waiting(r) for r in rows)
        served = live_types(conn) if backlog else set()
    for row in rows:  # a pending run of a type no live worker runs: nobody will claim it now
        row["no_live_worker"] = (
            row["status"] == PENDING and not is_waiting(row) and row["workflow_type"] not in served
        )
    return rows


def list_params(
    *, status: str | None, workflow_type: str | None, since: timedelta | None, limit: int, waiting: bool
) -> Row:
    """Check the filters of a list (InvalidInput) and return the parameters of
    ``reports.list_workflows`` but those of the key prefix (``keys.prefix_params``): what
    ``list_workflows`` and ``wfctl.aio.list`` send."""
    check_limit(limit)
    statuses = list_statuses(status)
    if waiting:
        if statuses not in (None, [PENDING]):
            raise InvalidInput(
                f"--waiting lists parked workflows, which are {PENDING}: it cannot be combined with "
                f"--status {status}"
            )
        statuses = [PENDING]
    several = statuses is not None and len(statuses) > 1
    return {
        "status": statuses[0] if statuses and not several else None,
        "statuses": statuses if several else None,
        "workflow_type": workflow_type,
        "since": _positive(since, "the window") if since is not None else None,
        "limit": limit,
        "waiting": waiting,
    }


def check_limit(limit: int, what: str = "limit") -> int:
    """A list's row limit, from 1 to ``MAX_LIMIT`` (InvalidInput naming it ``what`` otherwise)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"{what} must be a whole number from 1 to {MAX_LIMIT}, not {limit}")
    return limit


def list_statuses(status: str | None) -> list[str] | None:
    """The statuses a list keeps: ``status`` is one, or several separated by commas
    (``failed,cancelled``); None keeps every one. "waiting" is no status: a parked run is
    pending, and ``--waiting`` lists those."""
    if status is None:
        return None
    words = [w.strip() for w in status.split(",")]
    if WAITING_WORD in words:
        raise InvalidInput(
            f"invalid status {WAITING_WORD!r}: a run parked on a wait is {PENDING}; list those with --waiting"
        )
    return list(dict.fromkeys(check_status(w) for w in words))


def listed(rows: list[Row]) -> list[Row]:
    """The rows of ``reports.list_workflows``, each with what it waits for (``waiting_for``)."""
    for row in rows:
        waiting_for(row)
    return rows


def show_workflow(conn: Conn, workflow_id: str | UUID | None, key: str | None = None) -> WorkflowDetail:
    """One workflow's row (with what it waits for, its parent and deadline), its steps in order,
    its attempts, its children, events and messages, read in one snapshot. The workflow is named
    by its id or by ``key``, its idempotency key (wfctl/keys.py); NotFound when there is no such
    workflow."""
    given = workflow_id if isinstance(workflow_id, UUID) or workflow_id is None else parse_id(workflow_id)
    keys.check_one(given, key)
    with _snapshot(conn):
        ident = keys.run_id(conn, given, key)
        try:
            detail = _detail(conn, ident, json_loads=_exact_json)
        except (RecursionError, ValueError):
            # a stored value Python cannot read whole (nested deeper than the recursion limit,
            # or an integer of more than 4300 digits): show what can be shown
            return _detail(conn, ident, json_loads=_readable_json)
        values = [detail.workflow["input_data"], detail.workflow["output_data"]]
        values += [s["output_data"] for s in detail.steps]
        values += [e["value"] for e in detail.events]
        if any(_deeper_than(v, SHOW_JSON_DEPTH) for v in values):  # too deep to draw
            return _detail(conn, ident, json_loads=_readable_json)
        return detail


def workflow_row(
    conn: Conn,
    workflow_id: UUID | None,
    key: str | None = None,
    *,
    json_loads: Callable[[str | bytes], Any] | None = None,
) -> Row:
    """The workflow's row as ``show`` reads it (its wait folded into ``waiting_for``, its
    parent, deadline and durations), named by its id or by ``key``, its idempotency key (in one
    snapshot), its JSON decoded with ``json_loads`` (None: the connection's decoder); NotFound
    when there is no such workflow."""
    keys.check_one(workflow_id, key)
    with _snapshot(conn):
        return _workflow(conn, keys.run_id(conn, workflow_id, key), json_loads)


def _workflow(conn: Conn, ident: UUID, json_loads: Callable[[str | bytes], Any] | None) -> Row:
    return found_workflow(ident, _rows(conn, "reports.workflow", {"id": ident}, json_loads=json_loads))


def found_workflow(ident: UUID, found: list[Row]) -> Row:
    """The row ``reports.workflow`` read for ``ident``, with what it waits for
    (``waiting_for``); NotFound when there was none."""
    if not found:
        raise NotFound(f"no workflow with id {ident}")
    workflow = found[0]
    waiting_for(workflow)
    return workflow


def _detail(
    conn: Conn, ident: UUID, *, json_loads: Callable[[str | bytes], Any] | None = None
) -> WorkflowDetail:
    workflow = _workflow(conn, ident, json_loads)
    by_id = {"id": ident}
    return WorkflowDetail(
        workflow=workflow,
        steps=_rows(conn, "reports.workflow_steps", by_id, json_loads=json_loads),
        attempts=_rows(conn, "reports.workflow_attempts", by_id),
        children=_rows(conn, "reports.workflow_children", by_id),
        events=_rows(conn, "reports.workflow_events", by_id, json_loads=json_loads),
        message_topics=_rows(conn, "reports.workflow_message_topics", by_id),
        messages=_rows(conn, "reports.workflow_messages", {**by_id, "limit": SHOW_MESSAGES}),
    )


def workers(conn: Conn, *, stale: timedelta | None = None) -> list[Row]:
    """Every registered worker with its state (live, dead, stopped) and running count. Dead:
    its heartbeat is older than ``stale``, or (None) than its own ``dead_after``."""
    return _rows(conn, "reports.workers", {"stale": _threshold(stale)})


#: How many workflow types ``wfctl metrics`` gives series of their own by default (--max-types).
MAX_TYPE_SERIES = 100
#: The workflow_type label value of the series that sum the other types.
OTHER_TYPES = "(other)"


def metric_families(
    conn: Conn, *, stale: timedelta | None = None, since: timedelta, max_types: int = MAX_TYPE_SERIES
) -> list[Family]:
    """What ``wfctl metrics`` exposes, read in one snapshot. Only the ``max_types`` workflow
    types with the most workflows have series of their own; the others are summed under
    ``workflow_type="(other)"`` (a type of that name counts there too), so the number of series
    stays bounded whatever types are submitted."""
    if max_types < 0:
        raise InvalidInput(f"invalid --max-types {max_types}: must be 0 or more")
    labels = {**label_translation(), "other": OTHER_TYPES}
    with _snapshot(conn):
        counts = _rows(conn, "reports.workflow_counts", {**labels, "max_types": max_types})
        kept = sorted({r["workflow_type"] for r in counts} - {OTHER_TYPES})
        parked = _rows(conn, "reports.waiting_counts", {**labels, "kept": kept})
        pending = _rows(conn, "reports.oldest_pending")[0]
        stuck_rows = stuck(conn, stale=stale)
        worker_rows = workers(conn, stale=stale)
        window = {"since": _positive(since, "the window"), "workflow_type": None}
        steps = _rows(conn, "reports.step_metrics", {**window, **labels, "kept": kept})
    type_count = int(counts[0]["type_count"]) if counts else 0
    return [
        _workflow_family(counts),
        Family(
            "wfctl_workflows_running",
            "gauge",
            "Workflows running now (all types).",
            (Sample(sum(r["workflows"] for r in counts if r["status"] == RUNNING)),),
        ),
        _waiting_family(counts, parked),
        Family(
            "wfctl_workflows_stuck",
            "gauge",
            f"Running workflows whose worker's heartbeat is older than {_silence(stale)}, "
            "or whose worker stopped or is unknown.",
            (Sample(len(stuck_rows)),),
        ),
        Family(
            "wfctl_workflows_runnable",
            "gauge",
            "Pending workflows whose run_at has come (waiting for a worker).",
            (Sample(int(pending["runnable"])),),
        ),
        Family(
            "wfctl_oldest_pending_age_seconds",
            "gauge",
            "Seconds the oldest runnable pending workflow has waited since its run_at (0: none).",
            (Sample(float(pending["oldest_pending_age_seconds"])),),
        ),
        Family(
            "wfctl_workers",
            "gauge",
            f"Registered workers by state (dead: heartbeat older than {_silence(stale)}).",
            tuple(
                Sample(sum(1 for w in worker_rows if w["state"] == state), {"state": state})
                for state in WORKER_STATES
            ),
        ),
        Family(
            "wfctl_workflow_types_other",
            "gauge",
            f"Workflow types without series of their own (beyond the {max_types} with the most "
            f'workflows), summed under workflow_type="{OTHER_TYPES}".',
            (Sample(type_count - len(kept)),),
        ),
        *_step_families(steps, since),
    ]


def _workflow_family(counts: list[Row]) -> Family:
    by_key = {(r["workflow_type"], r["status"]): int(r["workflows"]) for r in counts}
    types = sorted({r["workflow_type"] for r in counts})
    return Family(
        "wfctl_workflows",
        "gauge",
        "Workflows in the database by type and status.",
        tuple(
            Sample(by_key.get((kind, status), 0), {"workflow_type": kind, "status": status})
            for kind in types
            for status in STATUSES
        ),
    )


def _waiting_family(counts: list[Row], parked: list[Row]) -> Family:
    """Every type in the database (as wfctl_workflows has it) times every wait kind, zeros
    explicit, so that a series exists before its first waiting workflow."""
    by_key = {(r["workflow_type"], r["kind"]): int(r["workflows"]) for r in parked}
    types = sorted({r["workflow_type"] for r in counts} | {r["workflow_type"] for r in parked})
    return Family(
        "wfctl_workflows_waiting",
        "gauge",
        "Workflows parked on a wait and not yet due, by type and what they wait for (kind: "
        f"{', '.join(WAIT_KINDS)}); wfctl_workflows counts them as pending.",
        tuple(
            Sample(by_key.get((kind, wait), 0), {"workflow_type": kind, "kind": wait})
            for kind in types
            for wait in WAIT_KINDS
        ),
    )


def _step_families(steps: list[Row], since: timedelta) -> list[Family]:
    """Gauges over the sliding window (they go down as steps leave it: not a summary, whose
    _count and _sum a reader takes for counters). One row per series: reports.step_metrics
    groups by the label values."""
    quantiles: list[Sample] = []
    sums: list[Sample] = []
    counts: list[Sample] = []
    for row in steps:
        labels = {"workflow_type": row["workflow_type"], "step_name": row["step_name"]}
        for quantile, column in (("0.5", "p50_seconds"), ("0.95", "p95_seconds")):
            quantiles.append(Sample(float(row[column]), {**labels, "quantile": quantile}))
        sums.append(Sample(float(row["sum_seconds"]), labels))
        counts.append(Sample(int(row["count"]), labels))
    window = (
        f"the completed steps of the workflows created in the last {_human(since)}, by workflow "
        "type and step name (a gauge over a sliding window: it goes down as steps leave it)"
    )
    return [
        Family(
            "wfctl_step_duration_window_seconds",
            "gauge",
            f"Median (quantile 0.5) and 95th percentile (0.95) of the durations of {window}.",
            tuple(quantiles),
        ),
        Family(
            "wfctl_step_duration_window_sum_seconds", "gauge", f"Total duration of {window}.", tuple(sums)
        ),
        Family("wfctl_step_duration_window_steps", "gauge", f"Number of {window}.", tuple(counts)),
    ]


def _silence(stale: timedelta | None) -> str:
    return "its own interval times its missed beats" if stale is None else _human(stale)


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
