"""What tests/db/test_exact_durations.py and tests/process/test_exact_durations_workers.py share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import fakeclock
import psycopg
import pytest
from helpers import with_db
from psycopg import conninfo

# Europe/Berlin: clocks spring forward on 2026-03-29 at 02:00 and fall back on 2026-10-25 at 03:00
AFTER_SPRING = datetime(2026, 3, 29, 10, 0, tzinfo=UTC)  # 12:00 CEST; 1 day earlier is 23h earlier


AFTER_AUTUMN = datetime(2026, 10, 25, 11, 0, tzinfo=UTC)  # 12:00 CET; 1 day earlier is 25h earlier


HOUR = timedelta(hours=1)


WORKER_IN, WORKER_OUT = "host:1:inside", "host:2:outside"


def warped(dsn: str, now: datetime) -> str:
    """``dsn`` in the time zone Europe/Berlin, with the database's clock (``wfctl_now()``, the
    schema's fake clock) stopped at ``now``."""
    fakeclock.stop(dsn, now)
    dbname = conninfo.conninfo_to_dict(dsn)["dbname"]
    warp = with_db(dsn, str(dbname), options="-c TimeZone=Europe/Berlin")
    with psycopg.connect(warp) as conn:  # the clock holds: wfctl_now() is the moment given
        assert conn.execute("SELECT wfctl_now()").fetchone()[0] == now
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "Europe/Berlin"
    return warp


def add_workflow(conn: psycopg.Connection, created: datetime, **columns: object) -> str:
    values = {"workflow_type": "order", "created_at": created, **columns}
    names = ", ".join(values)
    marks = ", ".join(f"%({k})s" for k in values)
    row = conn.execute(f"INSERT INTO workflows ({names}) VALUES ({marks}) RETURNING id", values).fetchone()
    return str(row[0])


def add_worker(conn: psycopg.Connection, wid: str, heartbeat: datetime) -> None:
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, concurrency, workflow_types, started_at, heartbeat_at)"
        " VALUES (%s, 'host', 1, 8, '{order}', %s, %s)",
        (wid, heartbeat - HOUR, heartbeat),
    )


@pytest.fixture(params=[AFTER_SPRING, AFTER_AUTUMN], ids=["spring-forward", "fall-back"])
def moment(request: pytest.FixtureRequest) -> datetime:
    return request.param
