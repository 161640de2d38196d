"""The words and ids operators type: workflow statuses and workflow ids, checked in one place.

The status words are spelled here and nowhere else in the package; the SQL of ``sql/`` keeps its
literals. tests/unit/test_sql_catalogue.py checks these against the schema's CHECK constraint and
fails on a status compared with a literal anywhere else in the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final
from uuid import UUID

from wfctl.errors import InvalidInput

PENDING: Final = "pending"
RUNNING: Final = "running"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

#: A step whose function raised and whose StepError the workflow handled (workflow_steps.status;
#: a step that failed its attempt is ``failed``, one that returned is ``completed``).
HANDLED: Final = "handled"
#: A step whose tries failed so far and whose run parked until the next one (``@wfctl.step``'s
#: retries, a backoff too long to wait in the worker): no result yet, a record of the tries.
RETRYING: Final = "retrying"

#: The words workflows.status may hold, in life-cycle order.
STATUSES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED)
#: The statuses a workflow ends in (prune removes only these).
FINISHED = (COMPLETED, FAILED, CANCELLED)
#: The statuses ``retry`` starts again from.
RETRYABLE = (FAILED, CANCELLED)


def parse_id(text: str) -> UUID:
    try:
        return UUID(text.strip())
    except (ValueError, AttributeError):
        raise InvalidInput(
            f"invalid workflow id {text!r}: not a UUID (such as 1b9e0f6c-8d7f-4a43-9a1e-9f3c2b0f3a11)"
        ) from None


def parse_statuses(text: str, allowed: Sequence[str] = STATUSES) -> list[str]:
    """A comma-separated list of status words, each one of ``allowed``."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in allowed]
    if bad or not words:
        raise InvalidInput(
            f"invalid status {', '.join(bad) or repr(text)}: use {', '.join(allowed)} (comma-separated)"
        )
    return words


def check_status(status: str) -> str:
    """Exactly one status word."""
    if status not in STATUSES:
        raise InvalidInput(f"invalid status {status!r}: use one of {', '.join(STATUSES)}")
    return status
