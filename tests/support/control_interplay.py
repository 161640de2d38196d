"""What tests/db/test_control_interplay.py and tests/process/test_control_interplay_workers.py share."""

from __future__ import annotations

from uuid import UUID

from helpers import rows


def children(dsn: str, parent: UUID) -> list[UUID]:
    return [
        UUID(str(i))
        for (i,) in rows(dsn, "SELECT id FROM workflows WHERE parent_id = %s ORDER BY created_at, id", parent)
    ]


def statuses(dsn: str, parent: UUID) -> dict[str, int]:
    return dict(rows(dsn, "SELECT status, count(*) FROM workflows WHERE parent_id = %s GROUP BY 1", parent))
