"""Everything the CLI draws: messages on stderr, data on stdout, Rich tables for people and JSON
for machines. The only module of the CLI that imports Rich."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:  # Rich is imported where it draws: a worker logging plain text never loads it
    from rich.console import Console
    from rich.text import Text

from wfctl.durations import format_duration
from wfctl.printable import INVISIBLE, printable
from wfctl.reports import StatsReport, WorkflowDetail
from wfctl.storedjson import Unreadable
from wfctl.waits import WAITING
from wfctl.words import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING

#: Width of tables written to a pipe or file (a terminal uses its own width, COLUMNS wins).
PIPE_WIDTH = 200

# Stored data (types, keys, step names, errors, worker ids, JSON) is written by any client of
# the database: it is drawn as plain text, never as Rich markup, and its control and invisible
# format characters (ESC, CR, BEL, the 8-bit CSI, a right-to-left override, a zero-width space
# ...) are shown escaped (wfctl/printable.py), so that no stored string can move the cursor,
# clear the screen, retitle the terminal or show other than it is.
# What json.dumps(ensure_ascii=False) leaves raw inside strings: DEL, C1, and the invisible
# characters (a JSON escape means the same, and shows).
_JSON_RAW = re.compile(f"[\x7f-\x9f{INVISIBLE}]")


def plain(value: Any, *, keep: str = "", style: str = "") -> Text:
    """``value`` as a Rich Text: never parsed as markup, control characters escaped."""
    from rich.text import Text

    return Text(printable(str(value), keep=keep), style=style)


def _err() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def _out() -> Console:
    from rich.console import Console

    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=PIPE_WIDTH if piped else None)


def error(message: str) -> None:
    """One line on stderr; red on a terminal."""
    console = _err()
    console.print(
        plain(f"wfctl: error: {message}", keep="\n\t", style="bold red" if console.is_terminal else "")
    )


def warn(message: str) -> None:
    console = _err()
    console.print(
        plain(f"wfctl: warning: {message}", keep="\n\t", style="yellow" if console.is_terminal else "")
    )


def notice(message: str) -> None:
    _err().print(plain(f"wfctl: {message}", keep="\n\t"))


def line(text: str) -> None:
    """One line of data on stdout, without Rich interpreting it (control characters escaped, the
    line feed included: one call, one line)."""
    sys.stdout.write(printable(text) + "\n")
    sys.stdout.flush()


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Unreadable):  # a stored value Python cannot read: say so in its place
        return unreadable_text(value)
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def unreadable_text(value: Unreadable) -> str:
    """The placeholder drawn for a stored JSON value Python cannot read."""
    return f"(a stored value that cannot be decoded: {value.reason})"


_PLACEHOLDER = re.compile(r'"\\u0000\d+\\u0000"')


def to_json(value: Any, indent: int | None = 2) -> str:
    """JSON text; the characters json.dumps leaves raw (DEL, C1, the invisible ones of
    wfctl/printable.py) escaped as ``\\uNNNN`` too (they can only occur inside strings, so the
    text stays valid and means the same).
    A finite Decimal (a stored number read exactly) is written with all its digits: it goes
    through json.dumps as a placeholder string, replaced afterwards by the number's text (a
    placeholder holds U+0000, which no stored string can)."""
    exact: dict[str, str] = {}

    def default(item: Any) -> Any:
        if isinstance(item, Decimal) and item.is_finite():
            token = f"\x00{len(exact)}\x00"
            exact[json.dumps(token)] = str(item)
            return token
        return _default(item)

    text = json.dumps(value, default=default, indent=indent, ensure_ascii=False)
    if exact:
        text = _PLACEHOLDER.sub(lambda m: exact.get(m.group(), m.group()), text)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(value: Any) -> None:
    sys.stdout.write(to_json(value) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> Text:
    """A table cell: always text (stored strings are not markup), control characters escaped."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    if value is None:
        return Text("-")
    if isinstance(value, datetime):
        return Text(value.astimezone().strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(value, float | Decimal):
        return Text(f"{value:.2f}")
    if isinstance(value, list | dict):
        return Text(to_json(value, indent=None))
    return plain(value)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    justify: Sequence[str] | None = None,
) -> None:
    """A Rich table on stdout."""
    from rich.table import Table

    grid = Table(
        title=None if title is None else plain(title, style="bold"),  # a Text keeps its own style
        title_justify="left",
        header_style="bold",
    )
    for index, name in enumerate(columns):
        align = justify[index] if justify else "left"
        # ids are copied from the screen: never cut one, let the other columns wrap instead
        is_id = name == "id"
        grid.add_column(name, justify=align, no_wrap=is_id, min_width=36 if is_id else None)  # type: ignore[arg-type]
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    _out().print(grid)


def key_values(title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
    from rich.table import Table

    grid = Table(
        title=None if title is None else plain(title, style="bold"),  # a Text keeps its own style
        title_justify="left",
        show_header=False,
        box=None,
    )
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in pairs:
        grid.add_row(key, cell(value))
    _out().print(grid)


# Reports: stats, list, show, workers. They take the plain rows of wfctl.reports.

STATUS_STYLES = {
    PENDING: "yellow",
    RUNNING: "cyan",
    COMPLETED: "green",
    FAILED: "bold red",
    CANCELLED: "dim",
    "live": "green",
    "dead": "bold red",
    "stopped": "dim",
    "missing": "bold red",
    # attempt outcomes (wfctl show)
    "error": "red",
    "abandoned": "bold red",
    "released": "yellow",
    "parked": "yellow",
    "lost": "dim",
}
TIMELINE_WIDTH = 40
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
_NUM = "right"


def styled(word: Any) -> Text:
    return plain(word, style=STATUS_STYLES.get(str(word), ""))


def seconds(value: Any) -> str:
    return format_duration(None if value is None else float(value))


def ago(value: Any) -> str:
    return "-" if value is None else f"{seconds(value)} ago"


def _count(value: Any, style: str) -> Text:
    from rich.text import Text

    number = int(value or 0)
    return Text(str(number), style=style if number else "")


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


def stuck_table(rows: Sequence[dict[str, Any]], title: str) -> None:
    table(
        title,
        ["id", "type", "step", "attempt", "owner", "owner state", "silent for"],
        [
            (
                r["id"],
                r["workflow_type"],
                f"{r['current_step']} {r['step_name']}" if r["step_name"] else r["current_step"],
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


def workflow_list(rows: Sequence[dict[str, Any]]) -> None:
    table(
        None,
        ["id", "type", "status", "attempt", "step", "created", "duration", "error"],
        [
            (
                r["id"],
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
        justify=["left", "left", "left", _NUM, _NUM, "left", _NUM, "left"],
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


def timeline_bar(offset: Any, duration: Any, span: float, style: str, width: int = TIMELINE_WIDTH) -> Text:
    """A bar placed at ``offset`` and ``duration`` long, on a line of ``width`` cells for ``span``."""
    from rich.text import Text

    if offset is None or span <= 0:
        return Text("")
    start = min(width - 1, max(0, int(float(offset) / span * width)))
    length = max(1, round(float(duration or 0) / span * width))
    length = min(length, width - start)
    return Text.assemble(" " * start, ("█" * length, style), " " * (width - start - length))


def _attempt(attempt: int, max_retries: int | None) -> str:
    return str(attempt) if max_retries is None else f"{attempt} of {1 + max_retries}"


def workflow_detail(
    detail: WorkflowDetail, *, traceback: bool = False, extra: Sequence[tuple[str, Any]] = ()
) -> None:
    """The workflow's row (``extra`` lines after its status), its input, output and error (with
    ``traceback``, the error's whole traceback), the step timeline and its attempts."""
    from rich.text import Text

    w = detail.workflow
    out = _out()
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
        out.print(Text(label, style="bold"))
        out.print(Text(to_json(value)))
    if w["error_message"]:
        out.print(Text("Error", style="bold red"))
        out.print(plain(w["error_message"], keep="\n\t", style="red"))
        if traceback and w["error_traceback"]:
            out.print(plain(w["error_traceback"], keep="\n\t"))
        elif w["error_traceback"]:
            notice("the error's traceback: wfctl show --traceback " + str(w["id"]))
    elif traceback:
        # no current error (a retry completed, say): the latest attempt that failed with one
        failed = [a for a in detail.attempts if a["traceback"]]
        if failed:
            last = failed[-1]
            title = f"Error of attempt {last['attempt']} (epoch {last['lease_epoch']})"
            out.print(Text(title, style="bold red"))
            out.print(plain(last["traceback"], keep="\n\t"))
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
        ["#", "step", "status", "attempt", "offset", "duration", "timeline", "error"],
        [
            (
                s["step_number"],
                s["step_name"],
                styled(s["status"]),
                s["attempt"],
                seconds(s["offset_seconds"]),
                seconds(s["duration_seconds"]),
                timeline_bar(
                    s["offset_seconds"], s["duration_seconds"], span, STATUS_STYLES.get(s["status"], "")
                ),
                _first_line(s["error_message"], 40),
            )
            for s in detail.steps
        ],
        justify=[_NUM, "left", "left", _NUM, _NUM, _NUM, "left", "left"],
    )


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


def workers_table(rows: Sequence[dict[str, Any]]) -> None:
    table(
        None,
        ["id", "host", "pid", "state", "heartbeat", "dead after", "running", "started", "version"],
        [
            (
                r["id"],
                r["hostname"],
                r["pid"],
                styled(r["state"]),
                ago(r["heartbeat_age_seconds"]),
                seconds(r["dead_after_seconds"]),
                f"{r['running']}/{r['concurrency']}",
                r["started_at"],
                r["version"],
            )
            for r in rows
        ],
        justify=["left", "left", _NUM, "left", _NUM, _NUM, _NUM, "left", "left"],
    )


class _NoProgress:
    def __call__(self, n: int) -> None:
        return None


def progress(description: str, total: int) -> Any:
    """A context manager yielding ``advance(n)``: a Rich progress bar when stderr is a terminal,
    nothing otherwise."""
    from contextlib import contextmanager

    @contextmanager
    def manager() -> Any:
        if not sys.stderr.isatty():
            yield _NoProgress()
            return
        from rich.progress import Progress

        with Progress(console=_err(), transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)

    return manager()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def raw(text: str) -> None:
    """Text on stdout exactly as given."""
    sys.stdout.write(text)
    sys.stdout.flush()
