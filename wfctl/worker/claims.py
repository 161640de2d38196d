"""Claiming runnable workflows in batches (SKIP LOCKED) and the LISTEN wake-up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg import sql

from wfctl import storedjson
from wfctl.context import HandledFailure, RecordedStep, Retrying
from wfctl.operations import WAIT_STEP, recv_step_name
from wfctl.queries import numbered, numbered_spliced, q
from wfctl.words import COMPLETED, HANDLED


class ClaimRow(NamedTuple):
    """One row the claim statement returns, its columns in this order (see worker.claim). The
    row without an id carries only retry_in: a rate limit held work back."""

    id: UUID | None
    workflow_type: str
    input_data: Any
    lease_epoch: int
    attempt: int
    max_retries: int
    current_step: int | None
    deadline_at: datetime | None
    deadline_error: str | None
    journal: list[list[Any]] | None  # [[number, name, output, handled], ...]: completed, handled steps
    db_now: datetime
    created_at: datetime | None  # the workflow's (None on the rate's row)
    priority: int | None
    run_at: datetime | None
    in_order: bool | None  # picked by wfctl_claim_ready (not a limited type's pick)
    partition: int | None  # the oid of the table holding the run (a partition when partitioned)
    parked_step: int | None  # the wait the run parked in and has not got past: its step...
    parked_topic: str | None  # ...the topic of a recv...
    parked_children: bool | None  # ...or true for a wait for children
    ahead_seq: int | None  # taken beyond the worker's free threads: its place (migration 0019)
    trace_context: str | None  # the submitter's W3C trace context (migration 0026)
    retry_in: float | None  # seconds until a rate limit lets the next start of held-back work go


@dataclass(frozen=True)
class Policy:
    """What the claim fills in from the workflow type when the submitter left it unset."""

    max_retries: int
    timeout: float | None = None  # seconds from the submit (the type's deadline)
    timeout_error: str | None = None  # "timed out after 1h"


@dataclass(frozen=True)
class Claimed:
    """A workflow this worker now holds, with what it needs to run or resume it."""

    id: UUID
    workflow_type: str
    input: Any
    epoch: int
    attempt: int
    max_retries: int
    current_step: int  # the last checkpointed step: what a completion expects to follow
    journal: dict[int, RecordedStep]
    db_now: datetime  # the database's clock at the claim
    claimed_at: float  # time.monotonic() when the claim's reply arrived: with db_now, a clock
    # that follows the database's and that no step of the worker's wall clock can move
    deadline_at: datetime | None = None  # past it, the run fails at its next step boundary
    deadline_error: str | None = None
    #: The partitioned layout: the oid of the workflows partition holding the run, where the
    #: group commit writes it (wfctl/worker/targets.py); None: through the parent tables.
    partition: int | None = None
    #: Taken within a concurrency limit (wfctl_claim_allowed): its end may let the next run of
    #: its type go, and nothing announces that, so the worker claims again when it ends.
    limited: bool = False
    #: time.monotonic() when the claim statement was sent: the lease is confirmed as of then
    #: (wfctl/worker/lease.py), however long its reply took. None: claimed_at.
    sent_at: float | None = None
    #: The wait (a recv, a wait for children) the run parked in as step ``parked_step`` and
    #: has not got past, by its step name: no step is stored for it, but a replay must meet
    #: it there (Context._claim_number, Context.patched). None: the run is at no such wait.
    parked_step: int | None = None
    parked_name: str | None = None
    #: Claimed ahead: taken beyond the worker's free threads (the claim's ``room``), with its
    #: place in the order the worker starts such runs (workflows.ahead_seq, migration 0019);
    #: it waits in the backlog for a thread, at most CLAIM_AHEAD_HOLD, and starts only once
    #: the worker's started_seq has reached it in the database. None: for a free thread.
    ahead_seq: int | None = None
    #: Why the run cannot be run, when its input or a completed step's output is stored as a
    #: value Python cannot read (wfctl/storedjson.py): the worker fails it at once, without
    #: retries, and the rest of the batch runs. None: it can be run.
    unreadable: str | None = None
    #: The W3C trace context stored with the run at its submit (wfctl/tracing.py): the parent of
    #: this execution's span when tracing is on. None: no submit traced it.
    trace_context: str | None = None

    @property
    def ahead(self) -> bool:
        return self.ahead_seq is not None

    @property
    def lease_from(self) -> float:
        return self.claimed_at if self.sent_at is None else self.sent_at


@dataclass(frozen=True)
class Batch:
    """What one claim took, and when a rate limit lets more go (None: no rate held work back)."""

    claimed: list[Claimed]
    retry_in: float | None = None
    idle: bool = False  # the statement marked the worker idle: it waits for a wake-up


FrontierKey = tuple[int, datetime, UUID]  # (priority, run_at, id) in the runnable index
#: Seconds between a worker's claims from the head of the runnable index, at most.
FULL_SCAN_EVERY = 1.0


@dataclass
class Frontier:
    """Where this worker's last claim stopped in the runnable index (migration 0011).

    A claimed run's index entry stays until a vacuum removes it, and a scan from the index's
    head steps over all of them; a scan from the key of the last run this worker claimed steps
    over only what other workers claimed since. Runs that land behind the key (a submit that
    committed late, a run handed back with an older run_at, a claim rolled back) are found by
    a scan from the head, which ``start`` asks for at least every ``full_every`` seconds. The
    key lives here, not in the session, so it survives reconnects and transaction pooling."""

    full_every: float = FULL_SCAN_EVERY
    key: FrontierKey | None = None
    full_at: float = float("-inf")  # time.monotonic() of the last scan from the head
    #: The partitioned layout: between scans from the head, read only the runs created from
    #: ``floor`` on (migration 0012), the oldest created_at the last scan from the head took,
    #: so that the pick leaves the older partitions alone. A run created before it is taken by
    #: the next scan from the head, which lowers the floor to it.
    bounded: bool = False
    floor: datetime | None = None

    def start(self, now: float) -> FrontierKey | None:
        """The key the next claim starts after (None: from the head)."""
        if self.key is None or now - self.full_at >= self.full_every:
            return None
        return self.key

    def rescan(self) -> None:
        """Have the next claim scan from the head: a run was announced that may sort behind
        the key."""
        self.full_at = float("-inf")

    def passed(self, announced: Announced) -> bool:
        """Whether a claim resuming after the key (and above the floor) could miss the runs a
        submit announced: they sort at or before the key, or were created before the floor."""
        if self.key is None:
            return False  # the next claim scans from the head anyway
        priority, run_at, _id = self.key
        if (-announced.priority, announced.run_at) <= (-priority, _micros(run_at)):
            return True
        return self.bounded and self.floor is not None and announced.created < _micros(self.floor)

    def floor_for(self, after: FrontierKey | None) -> datetime | None:
        """The floor of a claim that starts after ``after`` (None: no bound)."""
        return self.floor if self.bounded and after is not None else None

    def moved(self, rows: list[ClaimRow], after: FrontierKey | None, began: float) -> None:
        """A claim that started after ``after`` at ``began`` returned ``rows``: advance to
        the last run it took from the index in its order (and, from the head, set the floor)."""
        taken = [row for row in rows if row.in_order and row.id is not None]
        if after is None:
            self.full_at = began
            created = [row.created_at for row in taken if row.created_at is not None]
            if created:
                self.floor = min(created)
        keys = [
            (row.priority, row.run_at, row.id)
            for row in taken
            if row.priority is not None and row.run_at is not None and row.id is not None
        ]
        if keys:
            # claim order: priority DESC, run_at, id (uuids compare as PostgreSQL's do)
            self.key = max(keys, key=lambda k: (-k[0], k[1], k[2]))


def claim(
    conn: psycopg.Connection[Any],
    owner: str,
    policies: dict[str, Policy],
    limit: int,
    frontier: Frontier | None = None,
    *,
    addressable: bool = False,
    room: int = 0,
    ahead_from: int = 1,
) -> Batch:
    """Take up to ``limit`` runnable workflows of the types in ``policies`` (type -> what the
    type sets when the submitter left it unset), within the types' limits, the unlimited types'
    from ``frontier`` on (None: from the head) which then moves past what was taken. One
    statement, one commit. ``addressable``: the worker hears wake-ups addressed to it, and the
    statement marks it idle when it takes fewer than ``room`` runs (its threads without a run:
    some stay free), not idle otherwise (migration 0014); ``Batch.idle`` says which. The runs
    beyond the first ``room`` in claim order are claimed ahead (``Claimed.ahead_seq``: from
    ``ahead_from`` on, in claim order); the others are for the free threads, to start at once."""
    if limit <= 0 or not policies:
        return Batch([])
    types = list(policies)
    began = time.monotonic()
    after = frontier.start(began) if frontier is not None else None
    params = {
        "types": types,
        "retries": [policies[t].max_retries for t in types],
        "timeouts": [policies[t].timeout for t in types],
        "timeout_errors": [policies[t].timeout_error for t in types],
        "limit": limit,
        "owner": owner,
        "after_priority": after[0] if after else None,
        "after_run_at": after[1] if after else None,
        "after_id": after[2] if after else None,
        "floor": frontier.floor_for(after) if frontier is not None else None,
        "addressable": addressable,
        "room": room,
        "ahead_from": ahead_from,
    }
    # worker.claim_pruned: the partitioned layout's bound (sql/queries/worker.sql)
    pruned = frontier is not None and frontier.bounded
    statement = (
        numbered_spliced("worker.claim", "worker.claim_pruned") if pruned else numbered("worker.claim")
    )
    with psycopg.RawCursor(conn, row_factory=claim_rows) as cur:
        rows = cur.execute(statement.text, statement.args(params)).fetchall()
    arrived = time.monotonic()
    if frontier is not None:
        frontier.moved(rows, after, began)
    hints = [row.retry_in for row in rows if row.id is None and row.retry_in is not None]
    claimed = [
        Claimed(
            id=row.id,
            workflow_type=row.workflow_type,
            input=row.input_data,
            epoch=row.lease_epoch,
            attempt=row.attempt,
            max_retries=row.max_retries,
            current_step=row.current_step or 0,
            journal=_journal(row.journal),
            db_now=row.db_now,
            claimed_at=arrived,
            deadline_at=row.deadline_at,
            deadline_error=row.deadline_error,
            partition=row.partition if pruned else None,
            limited=row.in_order is False,
            sent_at=began,
            parked_step=row.parked_step,
            parked_name=_parked_name(row),
            ahead_seq=row.ahead_seq,
            unreadable=_unreadable(row),
            trace_context=row.trace_context,
        )
        for row in rows
        if row.id is not None
    ]
    return Batch(claimed, min(hints) if hints else None, idle=addressable and len(claimed) < room)


def claim_rows(cursor: Any) -> Callable[[Sequence[Any]], ClaimRow]:
    """The claim's rows as ``ClaimRow`` tuples, made straight from the values (a claim returns
    dozens of rows of 22 columns: no dictionary or keyword arguments per row). The statement's
    columns must be ClaimRow's, in its order."""
    names = tuple(column.name for column in cursor.description or ())
    if names != ClaimRow._fields:
        raise psycopg.ProgrammingError(f"the claim returned columns {names}, not {ClaimRow._fields}")
    return ClaimRow._make


def _journal(value: Any) -> dict[int, RecordedStep]:
    """The steps of a claim's journal column: completed, failed and handled, or retrying (empty
    when it cannot be read: the run is then not run, see ``_unreadable``)."""
    if not isinstance(value, list):
        return {}
    return {int(row[0]): _recorded(int(row[0]), *row[1:6]) for row in value}


def _recorded(
    number: int, name: str, output: Any, status: str, attempt: int | None, tries: int | None
) -> RecordedStep:
    made = int(tries or 1)
    if status == COMPLETED:
        return RecordedStep(number, name, output, tries=made)
    stored = output if isinstance(output, dict) else {}
    failure = HandledFailure(str(stored.get("type", "Exception")), str(stored.get("message", "")))
    if status == HANDLED:
        return RecordedStep(number, name, None, failure, tries=made)
    due = stored.get("next_try_at")
    retrying = Retrying(
        made, failure, int(attempt or 0), datetime.fromisoformat(due) if isinstance(due, str) else None
    )
    return RecordedStep(number, name, None, retrying=retrying, tries=made)


def _unreadable(row: ClaimRow) -> str | None:
    """Why ``row``'s run cannot be run: its input or a completed step's output is a value
    Python cannot read."""
    why = storedjson.reason(row.input_data)
    if why is not None:
        return f"input cannot be decoded: {why}"
    why = storedjson.reason(row.journal)
    if why is not None:
        return f"the output of a completed step cannot be decoded: {why}"
    return None


def _parked_name(row: ClaimRow) -> str | None:
    """The step name of the wait ``row``'s run parked in (see Claimed.parked_name)."""
    if row.parked_step is None:
        return None
    if row.parked_topic is not None:
        return recv_step_name(row.parked_topic)
    return WAIT_STEP if row.parked_children else None


def start_ahead(conn: psycopg.Connection[Any], owner: str, seq: int) -> None:
    """Record that the worker starts the runs it claimed ahead up to ``seq`` (their code runs
    only after this commits)."""
    conn.execute(q("worker.start_ahead"), {"id": owner, "seq": seq})


def listen(conn: psycopg.Connection[Any], owner: str) -> None:
    """LISTEN on the schema's channel and on the worker's own (addressed wake-ups)."""
    conn.execute(q("worker.listen"))
    conn.execute(sql.SQL(q("worker.listen_own")).format(worker=sql.Literal(owner)))


#: The payload of a wake-up for a run that may sort behind the frontier (a message, a child's
#: end, a result wait, a hand-back, a requeue, a retry, a limit raised). A submit's says where
#: its runs sort (``Announced``; empty from a schema older than version 18).
BEHIND = "head"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (as the database counts them)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Announced:
    """What a submit's wake-up says (``at P R C``, wfctl_wake_at): the priority and run_at of
    the first of its runs in claim order, and the oldest created_at among them, both in
    microseconds since the Unix epoch."""

    priority: int
    run_at: int
    created: int

    @classmethod
    def parse(cls, payload: str) -> Announced | None:
        parts = payload.split(" ")
        if len(parts) != 4 or parts[0] != "at":
            return None
        try:
            return cls(int(parts[1]), int(parts[2]), int(parts[3]))
        except ValueError:
            return None


@dataclass(frozen=True)
class Wakeups:
    count: int  # wake-ups received, now or during earlier statements
    behind: bool  # one of them was for a run that may sort behind the frontier
    announced: tuple[Announced, ...] = ()  # where the submits among them sort


def drain_notifications(conn: psycopg.Connection[Any]) -> Wakeups:
    """The wake-ups that arrived (received now or during earlier statements)."""
    payloads = [note.payload for note in conn.notifies(timeout=0)]
    announced = tuple(a for a in map(Announced.parse, payloads) if a is not None)
    return Wakeups(len(payloads), BEHIND in payloads, announced)
