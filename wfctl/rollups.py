"""The hourly and daily rollups of finished runs that ``stats`` and ``metrics`` read for long
windows (migration 0028, docs/reference/reports.md): asking whether they are behind, and
computing the next hours. The workers do it as a duty (``wfctl/worker/rollups.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from wfctl.queries import q

#: Hours one refresh computes at most (one transaction; the latest first).
HOURS_PER_REFRESH = 6


def due(conn: psycopg.Connection[Any]) -> bool:
    """Whether an hour is marked stale or a closed hour is not rolled up yet."""
    row = conn.execute(q("rollups.due")).fetchone()
    return bool(row and row[0])


def refresh(conn: psycopg.Connection[Any], hours: int = HOURS_PER_REFRESH) -> int:
    """Roll up at most ``hours`` closed hours (then the days they complete), in one transaction;
    how many hours it computed (0 as well while another session refreshes, or when no earlier
    refresh has marked the moment its closed hours are counted from)."""
    row = conn.execute(q("rollups.refresh"), {"hours": hours}).fetchone()
    return int(row[0]) if row else 0


def catch_up(
    conn: psycopg.Connection[Any], *, hours: int = HOURS_PER_REFRESH, stop: Callable[[], bool] | None = None
) -> int:
    """Refresh until a refresh computes fewer than ``hours`` (or ``stop()`` says so); the hours
    computed in all."""
    total, first = 0, True
    while stop is None or not stop():
        done = refresh(conn, hours)
        total += done
        if done == 0 and first:  # perhaps the first refresh here: it marked the moment to count from
            first = False
            continue
        if done < hours:
            break
        first = False
    return total
