"""One claimed workflow running on a worker thread: the Journal the Context records through.

Every write goes to the worker's database loop as a ``Request`` and this thread waits for it
to be committed (group commit with the other threads' writes). A write that comes back fenced
means the lease was lost, or the run's deadline passed: the run stops at once and commits
nothing more; past the deadline it fails with the deadline's error (a "timeout" write, the one
the database takes past it), unless the deadline duty failed it first.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict
from uuid import UUID

from wfctl import jsonvalue, storedjson
from wfctl.caller import Caller
from wfctl.context import (
    Context,
    ControlFlow,
    DeterminismError,
    HandledFailure,
    Lost,
    Parked,
    RecordedStep,
    Released,
    Retrying,
    StepFailed,
)
from wfctl.errors import PermanentError, StepError, WaitTimeout
from wfctl.operations import Op, operation
from wfctl.registry import WorkflowType
from wfctl.steps import StepOptions
from wfctl.tracing import RunTracing, run_tracing
from wfctl.tries import SHORT_BACKOFF, WAIT_SLICE, next_try
from wfctl.worker.calls import Call
from wfctl.worker.checkpoints import Kind, Request, storable_text
from wfctl.worker.claims import Claimed
from wfctl.worker.lease import Leases
from wfctl.worker.log import WorkerLog
from wfctl.worker.retry import backoff
from wfctl.worker.transactions import Expired, Fenced, TransactionPool, run_step

Send = Callable[[Request | Call], None]


class DeadlinePassed(ControlFlow):
    """The run's deadline passed: it fails now, without retries."""


class CannotDecode(ControlFlow):
    """A stored value the run needs (its input, a step's output, a message, a child's output)
    is one Python cannot read (wfctl/storedjson.py): the run fails now, without retries (every
    replay would meet the same value)."""


LEASE_RECHECK = 1.0  # seconds: how long a step waits for a re-confirming heartbeat before asking again
MAX_ERROR_CHARS = 2000
MAX_TRACEBACK_CHARS = 16000


class RunFields(TypedDict):
    """The fields every log line of a run carries (``WorkerLog.event``'s keyword fields)."""

    type: str
    attempt: int


def describe_error(error: BaseException) -> str:
    """The one line operators see: the exception's type and message, ``ValueError: bad sku``
    (a message of several lines keeps its first; the traceback has the rest)."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:MAX_ERROR_CHARS]


def format_traceback(error: BaseException) -> str:
    """The whole traceback, with file and line of every frame, at most MAX_TRACEBACK_CHARS
    (its end, where the error was raised, is what is kept)."""
    text = "".join(traceback.format_exception(error)).strip()
    return text[-MAX_TRACEBACK_CHARS:]


class Execution:
    """Runs ``claimed`` with ``workflow.fn`` and reports its outcome through ``send``."""

    def __init__(
        self,
        claimed: Claimed,
        workflow: WorkflowType,
        send: Send,
        stopping: threading.Event,
        log: WorkerLog,
        transactions: TransactionPool | None = None,
        leases: Leases | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.claimed = claimed
        self.id = str(claimed.id)  # for the log lines (made once: a uuid's str() is Python code)
        self._leases = leases
        self._caller = caller or Caller()  # the worker's: timeouts, abandoned calls, its event loop
        self._transactions = transactions
        self.workflow = workflow
        self._send = send
        self._stopping = stopping
        self._log = log
        self.lost = False  # set by the database loop when a heartbeat shows the lease is gone
        # claimed ahead and not yet recorded started in the database (workers.started_seq): the
        # loop records it (and waits for the commit) before the run gets a thread
        self.ahead = claimed.ahead
        self.terminal = False  # a final write (complete, fail, park, release) was sent
        # The last checkpoint, sent but not yet awaited: the workflow's own code runs on while
        # it commits, and the next step (or the end of the run) waits for it. A checkpoint that
        # is still queued when the run completes travels in the same row as the completion.
        self._pending: Request | None = None
        # A step whose StepError the workflow got, not yet stored: stored (history a replay
        # raises again) once the workflow goes past it; dropped when that StepError ends the
        # attempt, so that the step runs again in the next one.
        self._handled: Request | None = None
        # the last step this execution knows to be checkpointed (or sent): a completion is
        # only committed when the database shows it, so a run never completes without its steps
        self._last_step = claimed.current_step
        self.outcome: str | None = None
        # parked until a time or backing off: seconds from the settling write until the run is
        # due again (the database's run_at is no later: its clock read before this one's)
        self.due_in: float | None = None
        self.in_flight: tuple[int, str] | None = None  # the step number and name it runs now
        self.write_error: BaseException | None = None  # a write failed (not fenced): the database
        self.crash: str | None = None  # why the run ended without any final write being tried

    @property
    def key(self) -> tuple[UUID, int]:
        return (self.claimed.id, self.claimed.epoch)

    @property
    def settled(self) -> bool:
        """The attempt ended with a committed final write, or its lease went elsewhere. Any
        other end (a write the database refused, an internal error) leaves the row running
        under this worker: the worker then ends the attempt itself, counting it."""
        return self.outcome in ("completed", "parked", "released", "failed", "retry", "lost")

    # -- Journal ------------------------------------------------------------------------------

    def recorded(self, number: int) -> RecordedStep | None:
        return self.claimed.journal.get(number)

    def parked_wait(self, number: int) -> str | None:
        c = self.claimed
        return c.parked_name if c.parked_step == number else None

    def boundary(self, number: int, name: str) -> None:
        # the step the run is in now: each heartbeat reports it (worker.heartbeat), so that the
        # stuck report can name the step a run was in when its worker went silent
        self.in_flight = (number, name)
        if self.lost:
            raise Lost()
        self._keep_handled()
        self._settle()
        if self._stopping.is_set():
            raise Released()
        self._check_lease()
        self._check_deadline()

    def lease_fresh(self) -> bool:
        """The lease was confirmed recently enough to start the run or a step on it."""
        return self._leases is None or self._leases.fresh(self.claimed.lease_from)

    def _check_lease(self) -> None:
        """Start no step on a lease whose last confirmation is older than the limit (the worker
        was paused, or its heartbeats failed): wait for a heartbeat to confirm it, and raise
        Lost if that shows it gone (wfctl/worker/lease.py)."""
        if self._leases is None or self.lease_fresh():
            return
        confirmed = self._leases.reconfirm(
            self.claimed.lease_from,
            give_up=lambda: self.lost or self._stopping.is_set(),
            wait=LEASE_RECHECK,
        )
        if self.lost:
            raise Lost()
        if not confirmed:
            raise Released()  # stopping: the run is handed back

    def past_deadline(self) -> bool:
        """The run's deadline has passed by this execution's clock (never ahead of the
        database's)."""
        deadline = self.claimed.deadline_at
        return deadline is not None and self.now() >= deadline

    def _check_deadline(self) -> None:
        if self.past_deadline():
            raise DeadlinePassed(self.claimed.deadline_error or "timed out")

    def transaction(self, number: int, name: str, fn: Callable[[Any], str], tries: int = 1) -> Any:
        """A transactional step (wfctl/worker/transactions.py): ``fn`` and the checkpoint in one
        transaction on a pooled connection, fenced by this execution's epoch."""
        self._settle()
        if self._transactions is None:
            raise RuntimeError("this worker has no connection pool for transactional steps")
        c = self.claimed
        try:
            # the row's tries: written when more than one, or over a parked record of tries
            before = c.journal.get(number)
            counted = tries if tries > 1 or (before is not None and before.retrying is not None) else None
            output = run_step(
                self._transactions, c.id, c.epoch, c.attempt, number, name, self.now(), fn, tries=counted
            )
        except Fenced:
            raise Lost() from None
        except Expired as expired:
            raise DeadlinePassed(str(expired)) from None
        self._last_step = number
        why = storedjson.reason(output)
        if why is not None:
            raise CannotDecode(f"the output of step {number} ({name!r}) cannot be decoded: {why}")
        return output

    def coordinate(self, op: Op, number: int, name: str, params: dict[str, Any]) -> Any:
        """Run a coordination step in the database (wfctl/worker/calls.py) and wait for it."""
        self._settle()
        c = self.claimed
        described = operation(op)
        call = Call(described.op, c.id, c.epoch, c.attempt, number, name, self.now(), params)
        if described.parks is not None:  # the heartbeat must not take a parked run for a lost lease
            self.terminal = True
        self._send(call)
        call.wait()
        if call.failure is not None:
            self.write_error = call.failure
            raise Lost()
        if call.state == "done":
            self.terminal = False
            self._last_step = number
            why = storedjson.reason(call.output)
            if why is not None:
                raise CannotDecode(f"{described.what_came(number, name, params)} cannot be decoded: {why}")
            return call.output
        if call.state == "refused":  # the same call would be refused on every replay
            self.terminal = False
            raise PermanentError(str(call.output))
        if call.state == "expired":  # past the run's deadline: nothing was done
            self.terminal = False
            raise DeadlinePassed(str(call.output))
        if call.state == "parked":
            deadline = (call.output or {}).get("deadline") if isinstance(call.output, dict) else None
            what = described.parked_text(params)
            raise Parked(datetime.fromisoformat(deadline) if deadline else None, what)
        raise Lost()

    def _settle(self) -> None:
        """Wait for the checkpoint in flight; raise Lost if it was fenced out."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()
            if pending.failure is not None:
                self.write_error = pending.failure
            if pending.failure is not None or not pending.ok:
                raise Lost()

    def now(self) -> datetime:
        """The database's clock: its time at the claim plus the monotonic time since, so a
        step of this machine's wall clock (NTP) moves neither step times nor sleeps."""
        c = self.claimed
        return c.db_now + timedelta(seconds=time.monotonic() - c.claimed_at)

    def record(self, number: int, name: str, output_json: str, started_at: datetime, tries: int = 1) -> None:
        if self.lost:
            raise Lost()
        step = self._request(
            "step", step=number, name=name, output=output_json, started=started_at, tries=tries
        )
        self._checkpoint(step)

    def fail_step(
        self, number: int, name: str, failure: HandledFailure, started_at: datetime, tries: int = 1
    ) -> None:
        message = _message(failure)
        self._handled = self._request(
            "step",
            step=number,
            name=name,
            output=json.dumps({"type": failure.error_type, "message": message}),
            error=f"{failure.error_type}: {message}"[:MAX_ERROR_CHARS],
            started=started_at,
            tries=tries,
        )

    def call(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: StepOptions,
    ) -> Any:
        return self._caller.call(name, fn, args, kwargs, options)

    def retry_later(
        self, number: int, name: str, retrying: Retrying, delay: float, started_at: datetime
    ) -> None:
        """A try of step ``number`` failed: log it, then wait for the next one here (a short
        backoff), or park the run until then with the record of the tries (a long one, or a
        worker that stops during a short one: the next execution goes on counting)."""
        c = self.claimed
        failure = retrying.failure
        self._log.event(
            "step_retry",
            f"{self.id} step {number} {name!r} try {retrying.tries} failed: "
            f"{failure.error_type}: {_message(failure)}",
            level="warning",
            type=c.workflow_type,
            attempt=c.attempt,
            step=f"{number} {name}",
            tries=retrying.tries,
            retry_in=f"{delay:.2f}s",
        )
        due = self.now() + timedelta(seconds=delay)
        if delay <= SHORT_BACKOFF and self._pause(delay):
            return
        message = _message(failure)
        parked = self._write(
            "park",
            step=number,
            name=name,
            output=json.dumps(
                {
                    "tries": retrying.tries,
                    "type": failure.error_type,
                    "message": message,
                    "next_try_at": due.isoformat(),
                }
            ),
            error=f"{failure.error_type}: {message}"[:MAX_ERROR_CHARS],
            started=started_at,
            wake=due,
            tries=retrying.tries,
            retrying=True,
            terminal=True,
        )
        if not parked:
            raise Lost()
        self._last_step = number
        raise Parked(due, next_try(name, retrying.tries))

    def _pause(self, seconds: float) -> bool:
        """A short backoff in this thread: True once it has passed (and the run may go on);
        False when the worker stops meanwhile (the run parks instead of waiting). Looks at the
        stop (at once: an Event) and the lease at least every WAIT_SLICE; raises Lost when the
        lease is gone, DeadlinePassed past the run's deadline."""
        until = time.monotonic() + seconds
        while True:
            if self.lost:
                raise Lost()
            left = until - time.monotonic()
            if left <= 0:
                break
            if self._stopping.wait(min(WAIT_SLICE, left)):
                return False
        self._check_lease()
        self._check_deadline()
        return True

    def _keep_handled(self) -> None:
        """The workflow went past a step whose StepError it caught: that failure is now its
        history, checkpointed before anything it does next. Called by ``boundary`` (the Context
        calls it before every new step, wait or marker), before a final write, and before the
        completion."""
        handled, self._handled = self._handled, None
        if handled is not None:
            self._checkpoint(handled)

    def _checkpoint(self, request: Request) -> None:
        """Send a step's checkpoint once the one before it committed; the next step, wait or
        end of the run waits for this one."""
        self._settle()
        self._send(request)
        self._pending = request
        assert request.step is not None
        self._last_step = request.step

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        self._settle()
        if not self._write(
            "park",
            step=number,
            name=name,
            output=output_json,
            started=self.now(),
            wake=wake_at,
            terminal=True,
        ):
            raise Lost()
        self._last_step = number

    def repark(self, wake_at: datetime) -> None:
        self._settle()
        if not self._write("park", wake=wake_at, terminal=True):
            raise Lost()

    # -- running ------------------------------------------------------------------------------

    def _request(self, kind: Kind, **values: Any) -> Request:
        c = self.claimed
        return Request(c.id, c.epoch, kind, c.attempt, partition=c.partition, **values)

    def _write(self, kind: Kind, *, terminal: bool = False, **values: Any) -> bool:
        """Send a write and wait until it is committed; False when it was fenced out."""
        if kind != "complete":
            try:
                self._keep_handled()
                self._settle()
            except Lost:
                if kind != "timeout":  # a refused checkpoint does not stop the timeout
                    return False
        request = self._request(kind, **values)
        if terminal:
            self.terminal = True
        self._send(request)
        request.wait()
        if kind == "complete":  # the last checkpoint went in the same row or an earlier one
            try:
                self._settle()
            except Lost:
                return False
        if request.failure is not None:
            self.write_error = request.failure
            return False
        return request.ok

    def run(self) -> None:
        """Run the workflow to its end (or its park, release, loss) and record how it ended; in
        a span of its own when tracing is on (wfctl/tracing.py)."""
        tracing = run_tracing()
        if tracing is None:
            self._run(None)
            return
        c = self.claimed
        with tracing.execution(
            c.id, c.workflow_type, c.attempt, c.epoch, c.current_step, c.trace_context
        ) as span:
            self._run(tracing)
            tracing.outcome(span, self.outcome)

    def _run(self, tracing: RunTracing | None) -> None:
        c = self.claimed
        fields: RunFields = {"type": c.workflow_type, "attempt": c.attempt}
        self._log.event("started", self.id, **fields)
        began = time.monotonic()
        ctx = Context(
            c.id,
            c.workflow_type,
            c.input,
            c.attempt,
            self,
            dont_retry=self.workflow.dont_retry,
            tracing=tracing,
        )
        if self.lost:  # recovered or cancelled while it waited for a thread
            self._lost(began)
            return
        try:
            self._check_lease()
            self._check_deadline()
            if c.unreadable is not None:
                raise CannotDecode(c.unreadable)
            result = self.workflow.fn(ctx, c.input)
            try:
                output = jsonvalue.dumps(result)
            except jsonvalue.UnstorableJSON as exc:
                message = (
                    f"workflow {c.workflow_type!r} returned a value of type "
                    f"{type(result).__name__} that cannot be stored as JSON ({exc})"
                )
                self._fail(message, None, began)
                return
            self._keep_handled()  # a failure the workflow caught before it returned
            if self._write("complete", result=output, terminal=True, expect=self._last_step):
                self.outcome = "completed"
                self._log.event("completed", self.id, duration=_secs(began), **fields)
            else:
                self._refused(began)
        except Parked as parked:
            self.outcome = "parked"
            if parked.wake_at is not None:
                self.due_in = max(0.0, (parked.wake_at - self.now()).total_seconds())
            until = parked.wake_at.isoformat(timespec="seconds") if parked.wake_at else None
            if tracing is not None:
                tracing.parked(parked.waiting_for, parked.wake_at)
            self._log.event("parked", self.id, waiting_for=parked.waiting_for, until=until, **fields)
        except Released:
            if self._write("release", terminal=True):
                self.outcome = "released"
                self._log.event("released", self.id, reason="worker shutting down", **fields)
            else:
                self._refused(began)
        except Lost:
            self._refused(began)
        except DeadlinePassed as exc:
            self._timed_out(str(exc), began)
        except (DeterminismError, CannotDecode) as exc:
            self._fail(str(exc), None, began, final=True)
        except StepFailed as exc:
            error = exc.error
            self._fail(
                describe_error(error),
                format_traceback(error),
                began,
                final=self._permanent(error),
                step=(exc.number, exc.name, exc.started_at),
            )
        except StepError as exc:
            self._uncaught(exc, began)
        except Exception as exc:
            self._fail(describe_error(exc), format_traceback(exc), began, final=self._permanent(exc))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, ... from workflow code
            self._fail(describe_error(exc), format_traceback(exc), began)

    def _uncaught(self, exc: StepError, began: float) -> None:
        """A StepError left the workflow function. Raised by the step the run is at, with
        nothing done since: the workflow did not handle it, so the attempt fails as the step's
        error (a ``failed`` step row; the step runs again in the next attempt). Otherwise (caught
        and raised again later, or raised again by a replay) it is an error like any other."""
        handled, self._handled = self._handled, None
        if handled is not None and handled.step == exc.number:
            assert handled.name is not None and handled.started is not None
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            self._fail(
                describe_error(cause),
                format_traceback(cause),
                began,
                final=self._permanent(cause),
                step=(handled.step, handled.name, handled.started),
                tries=handled.tries,
            )
            return
        self._handled = handled
        self._fail(describe_error(exc), format_traceback(exc), began, final=self._permanent(exc))

    def _permanent(self, error: BaseException) -> bool:
        """Not to be retried: a ``wfctl.PermanentError``, or a type the workflow's
        ``dont_retry`` names."""
        return isinstance(error, (PermanentError, WaitTimeout, *self.workflow.dont_retry))

    def _fail(
        self,
        summary: str,
        trace: str | None,
        began: float,
        *,
        final: bool = False,
        step: tuple[int, str, datetime] | None = None,  # the step that failed: number, name, start
        tries: int = 1,  # the tries its function took
    ) -> None:
        c = self.claimed
        final = final or c.attempt > c.max_retries
        delay = None if final else backoff(c.attempt, self.workflow.retry_base, self.workflow.retry_cap)
        values: dict[str, object] = {
            "error": summary,
            "final": final,
            "delay": delay,
            "traceback": trace,
        }
        if step is not None:
            values.update(step=step[0], name=step[1], started=step[2], tries=tries)
        ok = self._write("fail", terminal=True, **values)
        if not ok:
            self._refused(began)
            return
        fields = {"type": c.workflow_type, "attempt": c.attempt, "duration": _secs(began)}
        if step is not None:
            fields["step"] = f"{step[0]} {step[1]}"
        if final:
            self.outcome = "failed"
            self._log.event("failed", f"{self.id} {summary}", level="error", **fields)
        else:
            self.outcome = "retry"
            self.due_in = delay or 0.0
            self._log.event(
                "retry",
                f"{self.id} {summary}",
                level="warning",
                retry_in=f"{timedelta(seconds=delay or 0).total_seconds():.2f}s",
                **fields,
            )

    def _refused(self, began: float) -> None:
        """A write came back fenced out (or the lease is known to be gone). Past the run's
        deadline the database refuses every write but the timeout: a run that has a deadline
        tries that one (the database takes it only past the deadline, by its own clock, and
        only while this execution holds the run); otherwise, or if that is refused too, the
        lease is gone (recovered, cancelled, or failed at its deadline by the deadline duty)."""
        if self.claimed.deadline_at is not None and not self.lost and self.write_error is None:
            self._timed_out(self.claimed.deadline_error or "timed out", began)
        else:
            self._lost(began)

    def _timed_out(self, message: str, began: float) -> None:
        """The run's deadline passed: it fails with the deadline's error, without retries."""
        c = self.claimed
        if not self._write("timeout", terminal=True, error=message):
            self._lost(began)
            return
        self.outcome = "failed"
        self._log.event(
            "failed",
            f"{self.id} {message}",
            level="error",
            type=c.workflow_type,
            attempt=c.attempt,
            duration=_secs(began),
        )

    def abandon_request(self) -> Request:
        """The write that ends this attempt when it ended without a committed final write:
        a failed attempt like any other (counted, backed off, 'failed' once retries are used
        up), with a plain message the database cannot refuse. Sent by the database loop."""
        c = self.claimed
        if self.write_error is not None:
            why = f"a write to the database failed ({_first_line(self.write_error)})"
        else:
            why = self.crash or "the worker could not record how it ended"
        final = c.attempt > c.max_retries
        delay = None if final else backoff(c.attempt, self.workflow.retry_base, self.workflow.retry_cap)
        message = f"attempt {c.attempt} ended without its final write: {why}"[:MAX_ERROR_CHARS]
        return Request(
            c.id, c.epoch, "fail", c.attempt, error=message, final=final, delay=delay, partition=c.partition
        )

    def _lost(self, began: float) -> None:
        if self.write_error is not None:
            self.outcome = "error"
            first = str(self.write_error).strip().splitlines()
            self._log.event(
                "error",
                f"{self.id} a write to the database failed "
                f"({type(self.write_error).__name__}: {first[0] if first else ''}): the run stops "
                "here and this attempt counts as failed",
                level="error",
                type=self.claimed.workflow_type,
                epoch=self.claimed.epoch,
                duration=_secs(began),
            )
            return
        self.outcome = "lost"
        self._log.event(
            "lost",
            f"{self.id} lease lost (recovered, cancelled, timed out or released elsewhere): nothing "
            "more is committed for it",
            level="warning",
            type=self.claimed.workflow_type,
            epoch=self.claimed.epoch,
            duration=_secs(began),
        )


def _message(failure: HandledFailure) -> str:
    """A try's error message as stored (text the database can hold, at most MAX_ERROR_CHARS)."""
    return (storable_text(failure.message) or "")[:MAX_ERROR_CHARS]


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()


def _secs(began: float) -> str:
    return f"{time.monotonic() - began:.3f}s"
