"""Which tables the group commit writes a run's rows in (sql/queries/worker.sql, flush).

In the unpartitioned layout, ``workflows`` and ``workflow_attempts``. In the partitioned one
(migration 0010), the partitions that hold the run: the claim returns the workflows partition's
oid, and an UPDATE of that partition by key reads one index, where an UPDATE of the parent
probes the index of every interval's partition for each row and, as a cached generic plan,
locks them all at every execution. The names are looked up once per partition and worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from wfctl.queries import q


@dataclass(frozen=True)
class Targets:
    """The two tables the flush updates, as (schema, name) or an unqualified name."""

    workflows: tuple[str, ...] = ("workflows",)
    attempts: tuple[str, ...] = ("workflow_attempts",)


PARENTS = Targets()


class PartitionTargets:
    """Where the runs of each workflows partition are written, by the partition's oid; a
    worker keeps one (the names of a partition do not change while it holds a running run,
    and ``forget`` drops an entry when they did: a partition renamed or dropped by hand)."""

    def __init__(self) -> None:
        self._known: dict[int, Targets] = {}

    def of(self, conn: psycopg.Connection[Any], partition: int | None) -> Targets:
        """The tables of the runs in ``partition`` (None: the parents)."""
        if partition is None:
            return PARENTS
        found = self._known.get(partition)
        if found is None:
            row = conn.execute(q("worker.partition_targets"), {"oid": partition}).fetchone()
            if row is None:
                found = PARENTS
            else:
                schema, workflows, attempts = row
                found = Targets((schema, workflows), (schema, attempts) if attempts else PARENTS.attempts)
            self._known[partition] = found
        return found

    def forget(self, partition: int) -> None:
        self._known.pop(partition, None)
