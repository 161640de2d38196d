"""What ``show`` and ``list`` draw about coordination: what a parked workflow waits for and how
long, its deadline, its parent and children, its events and messages. Drawn through
wfctl.cli.render (stored strings stay text, control characters escaped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wfctl.cli import render
from wfctl.operations import WAITS
from wfctl.reports import WorkflowDetail
from wfctl.waits import MESSAGE, WAITING, is_waiting, unconsumed_elsewhere
from wfctl.words import FINISHED

#: How many children ``show`` lists (``--json`` gives them all).
SHOW_CHILDREN = 10
#: The widest event value ``show`` draws in its table (``--json`` gives it whole).
EVENT_WIDTH = 60


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def what(found: dict[str, Any], topics: Sequence[dict[str, Any]] = ()) -> str:
    """``a message on 'approval'``, ``3 of 1000 child workflows``, ``a sleep`` (with ``topics``,
    the messages waiting on other topics too)."""
    kind = found["kind"]
    wait = WAITS.get(kind)
    text = wait.shown(found) if wait is not None else str(kind)
    if kind == MESSAGE:
        others = unconsumed_elsewhere(topics, found["topic"])
        if others:
            text += f" ({_plural(others, 'unconsumed message')} on other topics)"
    return text


def time_left(found: dict[str, Any]) -> str:
    """``4m05s (until 2026-12-03 11:00:00)``, ``no timeout``; for a woken one, since when."""
    until = found["until"]
    if until is None:
        return "no timeout"
    stamp = render.cell(until).plain
    left = float(found["seconds_left"] or 0)
    if left > 0:
        return f"{render.seconds(left)} (until {stamp})"
    return f"none: over since {stamp}"


def summary(detail: WorkflowDetail) -> list[tuple[str, Any]]:
    """The lines ``show`` adds to the workflow's key-value table."""
    w = detail.workflow
    pairs: list[tuple[str, Any]] = []
    found = w["waiting_for"]
    if found is not None:
        if found["state"] == WAITING:
            pairs.append(("waiting for", render.plain(what(found, detail.message_topics))))
            pairs.append(("time left", time_left(found)))
        else:
            woken = f"a worker: woken from its wait for {what(found, detail.message_topics)}"
            pairs.append(("waiting for", render.plain(woken)))
    if w["deadline_at"] is not None:
        left = float(w["deadline_seconds_left"] or 0)
        stamp = render.cell(w["deadline_at"]).plain
        if w["status"] in FINISHED:
            when = "no longer applies: finished"
        else:
            when = f"{render.seconds(left)} left" if left > 0 else "passed"
        pairs.append(("deadline", f"{stamp} ({when})"))
    if w["parent_id"] is not None:
        pairs.append(("parent", w["parent_id"]))
    if detail.children:
        counts = ", ".join(f"{n} {status}" for status, n in detail.children_by_status.items())
        pairs.append(("children", render.plain(f"{len(detail.children)}: {counts}")))
    return pairs


def tables(detail: WorkflowDetail) -> None:
    """The children (the first SHOW_CHILDREN), the events and the messages per topic."""
    if detail.children:
        shown = detail.children[:SHOW_CHILDREN]
        more = len(detail.children) - len(shown)
        render.table(
            f"Children (the first {len(shown)} of {len(detail.children)}; --json lists all)"
            if more
            else "Children",
            ["id", "type", "status", "created"],
            [(c["id"], c["workflow_type"], render.styled(c["status"]), c["created_at"]) for c in shown],
        )
    if detail.events:
        render.table(
            "Events",
            ["key", "value", "step", "updated"],
            [(e["key"], _short_json(e["value"]), e["step_number"], e["updated_at"]) for e in detail.events],
            justify=["left", "left", "right", "left"],
        )
    if detail.message_topics:
        render.table(
            "Messages",
            ["topic", "unconsumed", "consumed", "last sent"],
            [(t["topic"], t["unconsumed"], t["consumed"], t["last_sent_at"]) for t in detail.message_topics],
            justify=["left", "right", "right", "left"],
        )


def _short_json(value: Any) -> Any:
    text = render.to_json(value, indent=None)
    return render.plain(text if len(text) <= EVENT_WIDTH else text[: EVENT_WIDTH - 1] + "…")


def waiting_list(rows: Sequence[dict[str, Any]]) -> None:
    """``list --waiting``: what each waits for and how long."""
    render.table(
        None,
        ["id", "type", "waiting for", "time left", "step", "created"],
        [
            (
                r["id"],
                r["workflow_type"],
                render.plain(what(r["waiting_for"])),
                time_left(r["waiting_for"]),
                r["current_step"],
                r["created_at"],
            )
            for r in rows
            if is_waiting(r)
        ],
        justify=["left", "left", "left", "right", "right", "left"],
    )
