"""What tests/db/test_transaction_step.py and tests/process/test_transaction_step_workers.py share."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import rows


@pytest.fixture
def ledger_table(conn) -> None:
    conn.execute("CREATE TABLE app_ledger (workflow_id uuid NOT NULL, entry int NOT NULL)")


def ledger(dsn: str) -> list[tuple[Any, ...]]:
    return rows(dsn, "SELECT workflow_id, entry FROM app_ledger ORDER BY 1, 2")


def steps(dsn: str, wid: object) -> list[tuple[Any, ...]]:
    return rows(
        dsn,
        "SELECT step_number, step_name, status, lease_epoch FROM workflow_steps WHERE workflow_id = %s"
        " ORDER BY step_number",
        wid,
    )
