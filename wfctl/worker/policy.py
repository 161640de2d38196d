"""The worker loop's decisions, as plain functions of plain values (tested with a fake clock,
without processes): whether to claim now and how many, and whether a group commit waits for
more company or goes out."""

from __future__ import annotations

from dataclasses import dataclass

COALESCE_GAP = 0.0003  # seconds without a new write after which a group commit goes out
COALESCE_MAX = 0.002  # the longest a write waits for company


def free_slots(concurrency: int, held: int) -> int:
    """Room to claim: threads, plus as many claimed-ahead workflows waiting for a thread."""
    return 2 * concurrency - held


def should_claim(
    *, concurrency: int, held: int, backlog: int, more: bool, wakeups: int, poll_due: bool
) -> bool:
    """Claim now? Only with room; while the backlog still feeds the threads, only once there is
    room for a bigger batch; and only when there may be work: the last claim came back full,
    a NOTIFY arrived, or the poll interval is up."""
    free = free_slots(concurrency, held)
    if free <= 0:
        return False
    if backlog and free < max(1, concurrency // 2):
        return False
    return more or wakeups > 0 or poll_due


@dataclass(frozen=True)
class Coalesce:
    """Where a group commit being gathered stands."""

    waiting: int  # writes gathered so far
    active: int  # workflows running on threads (each may be about to write)
    max_batch: int
    started: float  # when gathering began
    last_arrival: float  # when the latest write arrived


def flush_now(c: Coalesce, now: float) -> bool:
    """Send the group commit now rather than wait for more writes? Yes once every running
    workflow has written (nobody else can come), the batch is full, nobody arrived within
    COALESCE_GAP (the others are busy in long steps), or the whole wait reached COALESCE_MAX."""
    if c.waiting >= c.active or c.waiting >= c.max_batch:
        return True
    if now - c.started >= COALESCE_MAX:
        return True
    return now - c.last_arrival >= COALESCE_GAP
