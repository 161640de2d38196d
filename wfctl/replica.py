"""Reports from a streaming standby: what the standby says about its own lag.

``wfctl stats|list|show|workers|metrics --replica DSN`` (or ``[reports] dsn`` in wfctl.toml)
read from a standby so that dashboards and cron reports leave the primary alone. A standby
shows the primary's data as of the last transaction it replayed; this module reads how far that
is behind, from the standby alone (the primary is not asked: it may be the one under load, or
gone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from wfctl.durations import format_duration
from wfctl.prometheus import Family, Sample
from wfctl.queries import q


@dataclass(frozen=True)
class ReplicaStatus:
    standby: bool
    paused: bool | None  # replay paused (pg_wal_replay_pause())
    replayed_age: float | None  # seconds since the last replayed transaction committed
    unreplayed_bytes: float | None  # WAL received and not yet replayed
    receiver: str | None  # the WAL receiver's status ('streaming'), None when none runs

    @property
    def worrying(self) -> bool:
        """Replay paused, or not streaming: what it shows falls ever further behind."""
        return self.standby and (bool(self.paused) or self.receiver != "streaming")

    def describe(self, where: str) -> str:
        """One line for stderr: where the report was read, and how current it is."""
        if not self.standby:
            return f"read from {where}, which is not a standby (it accepts writes): no replication lag"
        parts = []
        if self.replayed_age is None:
            parts.append("no transaction replayed yet since it started")
        else:
            parts.append(
                f"its data is as of {format_duration(self.replayed_age)} ago (the last transaction it "
                "replayed; longer when the primary has been idle)"
            )
        if self.unreplayed_bytes:
            parts.append(f"{int(self.unreplayed_bytes)} bytes of WAL received and not replayed yet")
        if self.paused:
            parts.append("replay is PAUSED (pg_wal_replay_resume() resumes it)")
        if self.receiver != "streaming":
            parts.append("it is NOT streaming from its primary now: newer changes are missing")
        return f"read from the standby {where}: " + "; ".join(parts)


def status(conn: psycopg.Connection[Any]) -> ReplicaStatus:
    with conn.cursor(row_factory=class_row(ReplicaStatus)) as cur:
        row = cur.execute(q("replica.status")).fetchone()
    assert row is not None
    return row


def age_family(found: ReplicaStatus) -> Family:
    """For ``wfctl metrics --replica``: how old the standby's data is (NaN: nothing replayed)."""
    age = found.replayed_age if found.replayed_age is not None else float("nan")
    return Family(
        "wfctl_replica_replayed_age_seconds",
        "gauge",
        "Seconds since the last transaction the standby these metrics were read from replayed "
        "committed on the primary (also grows while the primary is idle).",
        (Sample(age if found.standby else 0.0),),
    )
