"""The worker loop's decisions, as plain functions of plain values (tested with a fake clock,
without processes): whether to claim now and how many, and whether a group commit waits for
more company or goes out."""

from __future__ import annotations

from dataclasses import dataclass

COALESCE_GAP = 0.0003  # seconds without a new write after which a group commit goes out
COALESCE_MAX = 0.002  # the longest a write waits for company
#: Seconds a run claimed ahead (beyond the worker's free threads) waits for a thread before the
#: worker hands it back, for an idle worker to take (not an attempt: none of its code ran).
CLAIM_AHEAD_HOLD = 1.0


def free_slots(concurrency: int, held: int, ahead: bool = True) -> int:
    """Room to claim: threads, plus (``ahead``) as many claimed-ahead workflows waiting for a
    thread. Without ``ahead`` (the worker just handed back what it claimed ahead and has no
    thread free since) only the threads: it would claim back what it gave away."""
    return (2 if ahead else 1) * concurrency - held


def should_claim(
    *,
    concurrency: int,
    held: int,
    backlog: int,
    more: bool,
    wakeups: int,
    poll_due: bool,
    ahead: bool = True,
) -> bool:
    """Claim now? Only with room; while the backlog still feeds the threads, only once there is
    room for a bigger batch; and only when there may be work: the last claim came back full,
    a NOTIFY arrived, or the poll interval is up."""
    free = free_slots(concurrency, held, ahead)
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


def complete_at(active: int, max_batch: int) -> int:
    """The writes that complete a batch: one from every running workflow (nobody else can
    come), or a full one. The gathering loop is woken only by the write that reaches it."""
    return min(active, max_batch)


def flush_now(c: Coalesce, now: float) -> bool:
    """Send the group commit now rather than wait for more writes? Yes once the batch is
    complete (``complete_at``), nobody arrived within COALESCE_GAP (the others are busy in long
    steps), or the whole wait reached COALESCE_MAX."""
    if c.waiting >= complete_at(c.active, c.max_batch):
        return True
    if now - c.started >= COALESCE_MAX:
        return True
    return now - c.last_arrival >= COALESCE_GAP
