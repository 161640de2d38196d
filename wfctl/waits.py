"""What a parked workflow waits for, read from its row (migration 0006): the shape ``show``,
``list`` and their ``--json`` give it.

A workflow parked by ``ctx.recv``, ``ctx.wait`` or ``ctx.sleep`` is 'pending' with ``wait_kind``
set. It is *waiting* while its run_at is ahead: no worker may take it before a wake-up (a
message, its last child finishing) or its wake-up time (the sleep's end, the wait's timeout).
Once woken it is *woken*: runnable, like any pending run, until a worker claims it. The SQL of
reports.sql computes ``wait_state`` with the database's clock; nothing here reads a clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from wfctl.operations import WAITS, WaitKind
from wfctl.words import STATUSES

#: What ``wait_kind`` holds (the kinds and what is said of each: wfctl/operations.py).
SLEEP: Final = WaitKind.SLEEP
MESSAGE: Final = WaitKind.MESSAGE
CHILDREN: Final = WaitKind.CHILDREN

#: ``wait_state``: parked and not yet due, or woken and waiting for a worker.
WAITING: Final = "waiting"
WOKEN: Final = "woken"

#: The columns of reports.sql that describe a wait; ``waiting_for`` folds them into one value.
WAIT_COLUMNS = (
    "wait_state",
    "wait_kind",
    "wait_topic",
    "wait_remaining",
    "wait_total",
    "wait_until",
    "wait_seconds_left",
)
#: The keys of ``waiting_for`` that some kind fills (Wait.details), from ``wait_<key>``.
_DETAILS = ("topic", "remaining", "total")


def waiting_for(row: dict[str, Any]) -> dict[str, Any] | None:
    """Replace the wait columns of ``row`` by ``row["waiting_for"]``: None when the workflow is
    not parked, else ``{kind, state, topic, remaining, total, until, seconds_left}`` (``until``
    None: no timeout; the others as the kind's ``details`` say: ``topic`` for a message,
    ``remaining`` of ``total`` for children)."""
    values = {name: row.pop(name, None) for name in WAIT_COLUMNS}
    if values["wait_state"] is None:
        found = None
    else:
        kind = values["wait_kind"]
        wait = WAITS.get(kind)
        details = wait.details if wait is not None else ()
        found = {
            "kind": kind,
            "state": values["wait_state"],
            **{key: values[f"wait_{key}"] if key in details else None for key in _DETAILS},
            "until": values["wait_until"],
            "seconds_left": values["wait_seconds_left"],
        }
    row["waiting_for"] = found
    return found


def is_waiting(row: dict[str, Any]) -> bool:
    """A row (after ``waiting_for``) parked and not yet due."""
    found = row.get("waiting_for")
    return found is not None and found["state"] == WAITING


def by_status(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many of ``rows`` are in each status, in life-cycle order (statuses with none left out)."""
    counts = Counter(r["status"] for r in rows)
    ordered = {s: counts[s] for s in STATUSES if counts[s]}
    ordered.update({s: n for s, n in counts.items() if s not in ordered})
    return ordered


def unconsumed_elsewhere(topics: Iterable[dict[str, Any]], topic: str | None) -> int:
    """Messages waiting to be received on topics other than ``topic``."""
    return sum(int(t["unconsumed"]) for t in topics if t["topic"] != topic)
