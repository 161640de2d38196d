"""The words and ids operators type: workflow statuses and workflow ids, checked in one place."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from wfctl.errors import UsageError

STATUSES = ("pending", "running", "completed", "failed", "cancelled")
FINISHED = ("completed", "failed", "cancelled")


def parse_id(text: str) -> UUID:
    try:
        return UUID(text.strip())
    except (ValueError, AttributeError):
        raise UsageError(
            f"invalid workflow id {text!r}: not a UUID (such as 1b9e0f6c-8d7f-4a43-9a1e-9f3c2b0f3a11)"
        ) from None


def parse_statuses(text: str, allowed: Sequence[str] = STATUSES) -> list[str]:
    """A comma-separated list of status words, each one of ``allowed``."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in allowed]
    if bad or not words:
        raise UsageError(
            f"invalid status {', '.join(bad) or repr(text)}: use {', '.join(allowed)} (comma-separated)"
        )
    return words


def check_status(status: str) -> str:
    """Exactly one status word."""
    if status not in STATUSES:
        raise UsageError(f"invalid status {status!r}: use one of {', '.join(STATUSES)}")
    return status
