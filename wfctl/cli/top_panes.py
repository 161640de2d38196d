"""The panes of ``wfctl top`` as rows of cells, from a Snapshot (wfctl/top/snapshot.py): each
pane's columns, and its rows with a key (a run's id where Enter opens the run). Stored strings
are drawn through render.cell (never markup, control characters escaped). No widget here: the
Textual app (wfctl/cli/top_app.py) puts these rows in its tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wfctl.cli import render
from wfctl.limits import LimitRow
from wfctl.top.snapshot import BUCKET_SECONDS, BUCKETS, PARKED_KINDS, Snapshot

if TYPE_CHECKING:
    from rich.text import Text

_BARS = "▁▂▃▄▅▆▇█"
#: Cells of a type's sparkline: two ten-second buckets per cell.
SPARK_WIDTH = BUCKETS // 2


@dataclass(frozen=True)
class Pane:
    """One pane: its id (the table's), title, columns, and rows as (key, cells)."""

    id: str
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, list[Any]]]


def spark(values: Sequence[int], width: int = SPARK_WIDTH) -> str:
    """``values`` as ``width`` bar characters (neighbouring values summed), scaled to the
    largest; a space where nothing happened."""
    size = max(1, len(values) // width)
    sums = [sum(values[i : i + size]) for i in range(0, size * width, size)]
    top = max(sums, default=0)
    if top <= 0:
        return " " * width
    return "".join(" " if s == 0 else _BARS[min(len(_BARS) - 1, s * len(_BARS) // (top + 1))] for s in sums)


def _rate(per_second: float) -> str:
    return f"{per_second:.1f}"


def types_pane(snap: Snapshot) -> Pane:
    rows: list[tuple[str, list[Any]]] = []
    for t in snap.types:
        rows.append(
            (
                t.workflow_type,
                [
                    render.plain(t.workflow_type),
                    _rate(t.per_second),
                    spark(t.completions),
                    t.running,
                    t.pending,
                    *(t.parked.get(kind, 0) for kind in PARKED_KINDS),
                    render.plain(t.failed, style="bold red" if t.failed else ""),
                ],
            )
        )
    minutes = BUCKETS * BUCKET_SECONDS // 60
    return Pane(
        "types",
        f"Throughput and runs per type (completions/s over the last {BUCKET_SECONDS}s; "
        f"sparkline: the last {minutes} minutes)",
        ("type", "done/s", f"last {minutes}m", "running", "pending", *PARKED_KINDS, f"failed {minutes}m"),
        rows,
    )


def stuck_pane(snap: Snapshot) -> Pane:
    rows = [
        (
            str(r["id"]),
            [
                str(r["id"]),
                render.plain(r["workflow_type"]),
                render.plain(r["step_name"] if r["step_name"] is not None else r["current_step"]),
                render.plain(r["lease_owner"]),
                render.styled(r["owner_state"]),
                render.seconds(r["age_seconds"]),
            ],
        )
        for r in snap.stuck
    ]
    return Pane(
        "stuck",
        "Stuck runs (running on a worker that is dead, stopped or unknown): Enter opens one",
        ("id", "type", "step", "worker", "worker is", "silent for"),
        rows,
    )


def failures_pane(snap: Snapshot) -> Pane:
    rows = [
        (
            str(r["id"]),
            [
                str(r["id"]),
                render.plain(r["workflow_type"]),
                r["finished_at"],
                render.plain(_first_line(r["error_message"]), style="red"),
            ],
        )
        for r in snap.failures
    ]
    return Pane("failures", "Newest failed runs: Enter opens one", ("id", "type", "finished", "error"), rows)


def _first_line(text: Any, width: int = 80) -> str:
    if text is None:
        return "-"
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def workers_pane(snap: Snapshot) -> Pane:
    rows = []
    for w in snap.workers:
        load = f"{w['running']}/{w['concurrency']}" if w["concurrency"] is not None else str(w["running"])
        rows.append(
            (
                str(w["id"]),
                [
                    render.plain(w["id"]),
                    render.plain(w["hostname"]),
                    w["pid"],
                    render.styled(_worker_state(w)),
                    load,
                    render.seconds(w["heartbeat_age_seconds"]),
                ],
            )
        )
    return Pane(
        "workers",
        "Workers (stale: a heartbeat missed, not yet dead; load: running/concurrency)",
        ("worker", "host", "pid", "state", "load", "heartbeat"),
        rows,
    )


def _worker_state(w: dict[str, Any]) -> str:
    """live, stale (live, but its last heartbeat is older than its interval: one missed), dead
    or stopped."""
    age, beat = w["heartbeat_age_seconds"], w["heartbeat_seconds"]
    if w["state"] == "live" and age is not None and beat is not None and float(age) > float(beat) * 1.5:
        return "stale"
    return str(w["state"])


def limits_pane(snap: Snapshot) -> Pane:
    rows = []
    for row in snap.limits:
        effective = row.effective()
        rows.append(
            (
                row.workflow_type,
                [
                    render.plain(row.workflow_type),
                    _limit(row, effective.concurrency),
                    _limit(row, effective.key_concurrency),
                    "-" if effective.rate is None else str(effective.rate),
                    row.running,
                    render.plain(row.runnable, style="yellow" if _holding(row) else ""),
                ],
            )
        )
    return Pane(
        "limits",
        "Limits in force (held back: runnable runs waiting while the type is at its limit)",
        ("type", "concurrency", "per key", "rate", "running", "held back"),
        rows,
    )


def _limit(row: LimitRow, value: int | None) -> str:
    return "-" if value is None else str(value)


def _holding(row: LimitRow) -> bool:
    limit = row.effective().concurrency
    return bool(row.runnable) and (limit is None or row.running >= limit)


def steps_pane(snap: Snapshot) -> Pane:
    rows = [
        (
            f"{r['workflow_type']}\x00{r['step_name']}",
            [
                render.plain(r["workflow_type"]),
                render.plain(r["step_name"]),
                r["count"],
                render.seconds(r["avg_seconds"]),
                render.seconds(r["p95_seconds"]),
                render.seconds(r["max_seconds"]),
            ],
        )
        for r in snap.slow_steps or []
    ]
    return Pane(
        "steps",
        "Slowest steps (as wfctl stats: completed steps of the runs created in the window)",
        ("type", "step", "count", "avg", "p95", "max"),
        rows,
    )


PANES = (types_pane, stuck_pane, failures_pane, workers_pane, limits_pane, steps_pane)


def panes(snap: Snapshot) -> list[Pane]:
    return [build(snap) for build in PANES]


def cells(values: Sequence[Any]) -> list[Text]:
    return [render.cell(v) for v in values]
