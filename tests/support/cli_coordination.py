"""What tests/db/test_cli_coordination.py and tests/process/test_cli_coordination_workers.py share."""

from __future__ import annotations

from helpers import rows


def one(dsn: str, sql: str, *params: object) -> object:
    found = rows(dsn, sql, *params)
    return found[0][0] if found else None
