"""The time-partitioned layout (migration 0010): which layout a database has, converting to the
partitioned one, keeping partitions ahead of time, and pruning by dropping whole intervals.

The work is done by the SQL functions of migration 0010 (``wfctl_partition_convert``,
``wfctl_ensure_partitions``, ``wfctl_prune_partition``); this module calls them, turns their
refusals into wfctl's errors and retries a drop that could not get its locks in time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from wfctl import recovery
from wfctl.durations import as_seconds
from wfctl.errors import InvalidInput, InvalidState
from wfctl.queries import q

PARTITIONED = "partitioned"
UNPARTITIONED = "unpartitioned"
#: ``--partition-interval`` values, in days.
INTERVALS = {"1d": 1, "7d": 7, "30d": 30}
DEFAULT_INTERVAL = "1d"
#: Intervals ahead of the current one that ``wfctl init``, ``prune`` and the worker duty keep.
AHEAD = 7
#: How long a partition drop may wait for its locks (the hot path queues behind a waiting
#: ACCESS EXCLUSIVE request): past it the drop is given up and tried again.
LOCK_TIMEOUT = "500ms"
#: Tries per interval before prune leaves it for its next run.
DROP_TRIES = 3
DROP_PAUSE = 0.2
#: How often a worker looks for partitions to create (a catalog lookup when there is none).
DUTY_INTERVAL = 60.0


@dataclass(frozen=True)
class Layout:
    name: str  # PARTITIONED or UNPARTITIONED
    interval_days: int | None
    ahead: int | None

    @property
    def partitioned(self) -> bool:
        return self.name == PARTITIONED


@dataclass(frozen=True)
class Converted:
    workflows: int
    steps: int
    attempts: int
    partitions: int  # intervals made (three tables each)


@dataclass(frozen=True)
class Ensured:
    created: int  # intervals created now
    moved: int  # rows moved out of the default partitions into them
    busy: bool  # another session was creating them
    partitioned: bool  # the layout


@dataclass(frozen=True)
class PartitionPrune:
    dropped: int  # intervals dropped (or, dry run, that would be)
    workflows: int
    steps: int
    busy: int  # intervals prunable but left for later: their locks were not had in time


@dataclass(frozen=True)
class Partition:
    parent: str
    partition: str
    range_start: datetime | None
    range_end: datetime | None
    is_default: bool
    rows_estimate: int
    bytes: int


def parse_interval(text: str) -> int:
    """``1d``, ``7d`` or ``30d`` -> days."""
    days = INTERVALS.get(text.strip())
    if days is None:
        raise InvalidInput(f"--partition-interval {text!r}: use one of {', '.join(INTERVALS)}")
    return days


def layout(conn: psycopg.Connection[Any]) -> Layout:
    row = conn.execute(q("partitions.layout")).fetchone()
    assert row is not None
    interval = row[1]
    return Layout(str(row[0]), interval.days if interval is not None else None, row[2])


def convert(conn: psycopg.Connection[Any], days: int, *, ahead: int = AHEAD) -> Converted:
    """Convert the database to the partitioned layout in one transaction; refused while a live
    worker runs (its statements would wait on the locks, and its cached plans name the old
    tables) and when it is partitioned already."""
    live = recovery.slowest_live_worker(conn)
    if live is not None:
        raise InvalidState(
            f"live worker {live.id} is running: stop every worker before converting the tables "
            "(they are locked and rewritten in one transaction)"
        )
    current = layout(conn)
    if current.partitioned:
        raise InvalidState(f"this database is partitioned already (every {current.interval_days}d)")
    with conn.transaction():
        row = conn.execute(q("partitions.convert"), {"days": days, "ahead": ahead}).fetchone()
        assert row is not None
        conn.execute(q("partitions.analyze"))
    return Converted(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def ensure(conn: psycopg.Connection[Any]) -> Ensured:
    """Create the partitions of the intervals ahead that are missing (nothing in the
    unpartitioned layout), in a transaction of its own."""
    with conn.transaction():
        row = conn.execute(q("partitions.ensure")).fetchone()
    assert row is not None
    return Ensured(int(row[0]), int(row[1]), bool(row[2]), bool(row[3]))


def prune(
    conn: psycopg.Connection[Any],
    older_than: timedelta,
    statuses: Sequence[str],
    *,
    dry_run: bool = False,
    sleep: Any = time.sleep,
) -> PartitionPrune:
    """Drop the intervals that end before the cutoff and hold only prunable workflows (each in
    a transaction of its own, retried when its locks were not had within LOCK_TIMEOUT); with
    ``dry_run``, count them. What is not dropped is left to prune's row deletes."""
    row = conn.execute(q("partitions.cutoff"), {"older_than": as_seconds(older_than)}).fetchone()
    assert row is not None
    cutoff = row[0]
    ranges = conn.execute(q("partitions.droppable"), {"cutoff": cutoff}).fetchall()
    dropped = workflows = steps = busy = 0
    for start, end in ranges:
        params = {
            "start": start,
            "end": end,
            "statuses": list(statuses),
            "cutoff": cutoff,
            "dry_run": dry_run,
            "lock_timeout": LOCK_TIMEOUT,
        }
        for attempt in range(DROP_TRIES):
            try:
                with conn.transaction():
                    result = conn.execute(q("partitions.prune_partition"), params).fetchone()
                    assert result is not None  # OUT parameters: always one row
                    state, w, s = result
                break
            except pg_errors.LockNotAvailable:
                if attempt + 1 == DROP_TRIES:
                    state = "busy"
                else:
                    sleep(DROP_PAUSE * (attempt + 1))
        if state in ("dropped", "prunable"):
            dropped += 1
            workflows += int(w)
            steps += int(s)
        elif state == "busy":
            busy += 1
    return PartitionPrune(dropped, workflows, steps, busy)


def partitions(conn: psycopg.Connection[Any]) -> list[Partition]:
    """Every partition of the three tables, oldest first per table, the default one last."""
    cur = conn.execute(q("partitions.list"))
    return [Partition(*r) for r in cur.fetchall()]
