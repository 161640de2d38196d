"""The reports the CLI draws (``stats``, ``list``, ``show``, ``workers``) from the plain rows of
wfctl.reports, with the primitives of wfctl.cli.render (stored strings stay text, control
characters escaped). What a parked run waits for is wfctl.cli.render_waits'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wfctl.cli.render import (
    STATUS_STYLES,
    ago,
    heading,
    json_block,
    key_values,
    notice,
    plain,
    seconds,
    styled,
    table,
    text_block,
    timeline_bar,
)
from wfctl.durations import format_duration
from wfctl.printable import printable
from wfctl.reports import StatsReport, WorkflowDetail
from wfctl.waits import WAITING
from wfctl.words import FINISHED, PENDING

if TYPE_CHECKING:
    from rich.console import JustifyMethod
    from rich.text import Text

SUCCESS_COLUMNS = (
    "type",
    "total",
    "completed",
    "failed",
    "running",
    "pending",
    "waiting",
    "cancelled",
    "success",
    "p50",
    "p95",
)
_NUM: JustifyMethod = "right"


def _count(value: Any, style: str) -> Text:
    number = int(value or 0)
    return plain(number, style=style if number else "")


def stats_report(report: StatsReport, since: str, stale: str | None) -> None:
    """The three stats tables; a one-line notice (stderr) for each that has nothing to show, and
    one for each type whose pending workflows no live worker runs. ``stale`` None: each worker
    is judged by its own heartbeat."""
    kind = f" of type {report.workflow_type!r}" if report.workflow_type else ""
    if report.window_empty:
        notice(f"no workflows{kind} were created in the last {since}")
    else:
        table(
            f"Success rate by workflow type, created in the last {since}",
            SUCCESS_COLUMNS,
            [
                (
                    r["workflow_type"],
                    r["total"],
                    r["completed"],
                    _count(r["failed"], "bold red"),
                    r["running"],
                    r["pending"],
                    r["waiting"],
                    r["cancelled"],
                    f"{r['success_pct']}%",
                    seconds(r["p50_seconds"]),
                    seconds(r["p95_seconds"]),
                )
                for r in report.success_rate
            ],
            justify=["left", *[_NUM] * 10],
        )
    for r in report.unserved:
        notice(
            f"{r['pending']} pending workflow(s) of type {r['workflow_type']!r} wait for a worker: "
            "no live worker runs this type"
        )
    if report.stuck:
        silent = f"silent for more than {stale}" if stale else "missed its heartbeats"
        stuck_table(report.stuck, f"Stuck runs: worker {silent}")
    elif not report.window_empty:
        beating = f"has beaten within {stale}" if stale else "is heartbeating"
        notice(f"no stuck runs{kind}: every running workflow's worker {beating}")
    if report.slow_steps:
        table(
            f"Slowest steps, workflows created in the last {since}",
            ["type", "step", "count", "avg", "p50", "p95", "max"],
            [
                (
                    r["workflow_type"],
                    r["step_name"],
                    r["count"],
                    seconds(r["avg_seconds"]),
                    seconds(r["p50_seconds"]),
                    seconds(r["p95_seconds"]),
                    seconds(r["max_seconds"]),
                )
                for r in report.slow_steps
            ],
            justify=["left", "left", *[_NUM] * 5],
        )
    elif not report.window_empty:
        notice(f"no completed steps yet in the workflows created in the last {since}")


def step_in_flight(row: dict[str, Any]) -> str:
    """The step a stuck run was in: its number and name when known, else what it followed."""
    number = row["step_in_flight"]
    if row.get("step_in_flight_name"):
        return f"{number} {row['step_in_flight_name']}"
    if row.get("step_name"):
        return f"{number} (after {row['current_step']} {row['step_name']})"
    return str(number)


def stuck_table(rows: Sequence[dict[str, Any]], title: str) -> None:
    table(
        title,
        ["id", "type", "step in flight", "attempt", "owner", "owner state", "silent for"],
        [
            (
                r["id"],
                r["workflow_type"],
                step_in_flight(r),
                r["attempt"],
                r["lease_owner"],
                styled(r["owner_state"]),
                seconds(r["age_seconds"]),
            )
            for r in rows
        ],
        justify=["left", "left", "left", _NUM, "left", "left", _NUM],
    )


def _first_line(message: Any, width: int = 60) -> Text | None:
    """The first line of a stored message (cut at a line feed only), escaped, at most ``width``."""
    if not message:
        return None
    first = printable(str(message).strip().split("\n")[0].rstrip("\r"))
    return plain(first if len(first) <= width else first[: width - 1] + "…")


def workflow_list(rows: Sequence[dict[str, Any]], *, keys: bool = False) -> None:
    """``list``'s table; with ``keys`` (``list --key``), each run's idempotency key after its id."""
    key = ["key"] if keys else []
    left: JustifyMethod = "left"
    table(
        None,
        ["id", *key, "type", "status", "attempt", "step", "created", "duration", "error"],
        [
            (
                r["id"],
                *([r["idempotency_key"]] if keys else []),
                r["workflow_type"],
                _list_status(r),
                r["attempt"],
                r["current_step"],
                r["created_at"],
                seconds(r["duration_seconds"]),
                _first_line(r["error_message"]),
            )
            for r in rows
        ],
        justify=[left, *([left] if keys else []), left, left, _NUM, _NUM, left, _NUM, left],
    )


def _list_status(row: dict[str, Any]) -> Text:
    """A list row's status; a pending run of a type no live worker runs says so."""
    if row.get("no_live_worker"):
        woken = " (woken)" if row.get("waiting_for") else ""
        return plain(
            f"{row['status']}{woken} (no live worker)", style=STATUS_STYLES.get(str(row["status"]), "")
        )
    return workflow_status(row)


def workflow_status(row: dict[str, Any]) -> Text:
    """The status ``show`` and ``list`` give a row: ``waiting`` while it is parked on a wait and
    not due (wfctl.waits), ``pending (woken)`` once woken, else the stored status."""
    found = row.get("waiting_for")
    if found is None:
        return styled(row["status"])
    if found["state"] == WAITING:
        return plain("waiting", style="yellow")
    return plain(f"{row['status']} (woken)", style="yellow")


def _attempt(attempt: int, max_retries: int | None) -> str:
    return str(attempt) if max_retries is None else f"{attempt} of {1 + max_retries}"


def workflow_detail(
    detail: WorkflowDetail, *, traceback: bool = False, extra: Sequence[tuple[str, Any]] = ()
) -> None:
    """The workflow's row (``extra`` lines after its status), its input, output and error (with
    ``traceback``, the error's whole traceback), the step timeline and its attempts."""
    w = detail.workflow
    key_values(
        f"Workflow {w['id']}",
        [
            ("type", w["workflow_type"]),
            ("status", workflow_status(w)),
            *extra,
            ("attempt", _attempt(w["attempt"], w["max_retries"])),
            ("current step", w["current_step"]),
            ("priority", w["priority"]),
            ("idempotency key", w["idempotency_key"]),
            # only for a run submitted with one (the per-key limit's key)
            *([("concurrency key", w["concurrency_key"])] if w.get("concurrency_key") is not None else []),
            ("created", w["created_at"]),
            ("run at", _run_at(w)),
            ("started", w["started_at"]),
            ("finished", w["finished_at"]),
            ("duration", seconds(w["duration_seconds"])),  # time in steps
            ("elapsed", seconds(w["elapsed_seconds"])),  # first claim to finish (or now)
            ("updated", w["updated_at"]),
            ("owner", w["lease_owner"]),
            ("lease epoch", w["lease_epoch"]),
        ],
    )
    for label, value in (("Input", w["input_data"]), ("Output", w["output_data"])):
        if value is None:
            continue
        heading(label)
        json_block(value)
    if w["error_message"]:
        if w["status"] in FINISHED:
            heading("Error", style="bold red")
            text_block(w["error_message"], style="red")
        else:
            # the run goes on: the error is an earlier attempt's (the attempts table has it too)
            failed = [a for a in detail.attempts if a["error"] and a["attempt"] < w["attempt"]]
            which = f"attempt {failed[-1]['attempt']}" if failed else "an earlier attempt"
            heading(f"Error of {which} (the run goes on, in attempt {w['attempt']})", style="yellow")
            text_block(w["error_message"])
        if traceback and w["error_traceback"]:
            text_block(w["error_traceback"])
        elif w["error_traceback"]:
            notice("the error's traceback: wfctl show --traceback " + str(w["id"]))
    elif traceback:
        # no current error (a retry completed, say): the latest attempt that failed with one
        failed = [a for a in detail.attempts if a["traceback"]]
        if failed:
            last = failed[-1]
            title = f"Error of attempt {last['attempt']} (epoch {last['lease_epoch']})"
            heading(title, style="bold red")
            text_block(last["traceback"])
        else:
            notice("no traceback: no attempt of this workflow raised an error")
    if detail.steps:
        _steps_table(detail, w)
    else:
        notice("no steps recorded yet")
    if detail.attempts:
        _attempts_table(detail.attempts)


def _run_at(w: dict[str, Any]) -> Any:
    """The row's run_at; for a parked run without a timeout (its run_at is the year 9999), when it
    will run."""
    found = w.get("waiting_for")
    if found is not None and found["state"] == WAITING and found["until"] is None:
        return "when woken (no timeout)"
    return w["run_at"]


def _steps_table(detail: WorkflowDetail, w: dict[str, Any]) -> None:
    ends = [float(s["offset_seconds"] or 0) + float(s["duration_seconds"] or 0) for s in detail.steps]
    span = max([*ends, float(w["elapsed_seconds"] or 0)]) if w["finished_at"] else max(ends)
    table(
        f"Steps (timeline: {format_duration(span)} from the first claim)",
        ["#", "step", "status", "attempt", "tries", "offset", "duration", "timeline", "error"],
        [
            (
                s["step_number"],
                s["step_name"],
                _step_status(s),
                s["attempt"],
                s["tries"],
                seconds(s["offset_seconds"]),
                seconds(s["duration_seconds"]),
                timeline_bar(
                    s["offset_seconds"], s["duration_seconds"], span, STATUS_STYLES.get(s["status"], "")
                ),
                _first_line(s["error_message"], 40),
            )
            for s in detail.steps
        ],
        justify=[_NUM, "left", "left", _NUM, _NUM, _NUM, _NUM, "left", "left"],
    )


def _step_status(step: dict[str, Any]) -> Any:
    """A step's status; a retrying one's with the time of its next try; a sleep the run is
    parked in, with its end (its row is written when it starts: it is not completed yet)."""
    if step.get("sleeping_until") is not None:
        until = step["sleeping_until"].astimezone().strftime("%Y-%m-%d %H:%M:%S")
        return plain(f"sleeping, until {until}", style=STATUS_STYLES.get(PENDING, ""))
    if step.get("next_try_at") is None:
        return styled(step["status"])
    due = step["next_try_at"].astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return plain(f"{step['status']}, next try {due}", style=STATUS_STYLES.get(step["status"], ""))


def _attempts_table(attempts: Sequence[dict[str, Any]]) -> None:
    """Every execution: when and where it ran and how it ended."""
    table(
        "Attempts",
        ["attempt", "epoch", "worker", "started", "ran", "outcome", "steps", "error"],
        [
            (
                a["attempt"],
                a["lease_epoch"],
                a["worker_id"],
                a["started_at"],
                seconds(a["duration_seconds"]),
                styled(a["outcome"]),
                a["last_step"],
                _first_line(a["error"], 60),
            )
            for a in attempts
        ],
        justify=[_NUM, _NUM, "left", "left", _NUM, "left", _NUM, "left"],
    )


def _release(row: dict[str, Any]) -> str | None:
    """A worker's release and the schema version it was built for: ``0.2.0 (schema 30)``."""
    version, built_for = row.get("version"), row.get("schema_version")
    return f"{version} (schema {built_for})" if version and built_for else version


def workers_table(rows: Sequence[dict[str, Any]]) -> None:
    table(
        None,
        [
            "id",
            "host",
            "pid",
            "state",
            "heartbeat",
            "dead after",
            "running",
            "abandoned",
            "started",
            "version",
        ],
        [
            (
                r["id"],
                r["hostname"],
                r["pid"],
                styled(r["state"]),
                ago(r["heartbeat_age_seconds"]),
                seconds(r["dead_after_seconds"]),
                f"{r['running']}/{r['concurrency']}",
                r["abandoned_calls"],  # step calls that outlived their timeout and still run
                r["started_at"],
                _release(r),
            )
            for r in rows
        ],
        justify=["left", "left", _NUM, "left", _NUM, _NUM, _NUM, _NUM, "left", "left"],
    )
