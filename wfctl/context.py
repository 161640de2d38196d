"""The workflow-facing API: ``Context.step``, ``Context.sleep`` and the coordination steps
(messages, events, child workflows, patches) over a small journal.

The context knows nothing of Postgres or of the worker: it asks a ``Journal``
(wfctl/journal.py) what step N recorded before, and tells it to record a new result (durable
before the next step starts). The worker implements the journal over Postgres; a test can
implement it in memory (``MemoryJournal``, wfctl/testing.py, importable from here too).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast
from uuid import UUID

from wfctl import jsonvalue
from wfctl.durations import parse_duration, timeout_message, timeout_seconds
from wfctl.errors import ChildFailed, InvalidInput, PermanentError, StepError, WaitTimeout
from wfctl.journal import (
    ControlFlow,
    DeterminismError,
    HandledFailure,
    Journal,
    Lost,
    Parked,
    RecordedStep,
    Released,
    Retrying,
    StepFailed,
)
from wfctl.operations import WAIT_STEP, Op, operation, recv_step_name
from wfctl.steps import StepOptions, options_of
from wfctl.testing import MemoryJournal
from wfctl.tracing import RunTracing
from wfctl.tries import failure_of, next_delay, tries_before
from wfctl.words import COMPLETED

__all__ = [
    "MAX_STEP_NAME",
    "MAX_TOPIC",
    "PATCH_PREFIX",
    "SLEEP_STEP",
    "WAIT_STEP",
    "Context",
    "ControlFlow",
    "DeterminismError",
    "HandledFailure",
    "Journal",
    "Lost",
    "MemoryJournal",
    "Parked",
    "RecordedStep",
    "Released",
    "Retrying",
    "StepFailed",
    "check_label",
    "recv_step_name",
]

T = TypeVar("T")

SLEEP_STEP = "sleep"
MAX_STEP_NAME = 200  # workflow_steps.step_name is varchar(200)
MAX_TOPIC = 150  # a message topic or an event key (workflow_messages / workflow_events checks)
PATCH_PREFIX = "patch:"  # the step name of a ctx.patched() marker
#: Step results whose stored JSON reads back as the value itself (a str that could not be stored
#: was refused before): returned without decoding their JSON again
_SAME_AS_STORED: frozenset[type] = frozenset({int, str, bool, type(None)})


class Context:
    """Passed to every workflow function as its first argument."""

    def __init__(
        self,
        workflow_id: UUID | str,
        workflow_type: str,
        input: Any,
        attempt: int,
        journal: Journal,
        *,
        dont_retry: tuple[type[BaseException], ...] = (),
        tracing: RunTracing | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.input = input
        self.attempt = attempt
        self._journal = journal
        # the workflow's dont_retry: a step's try that raises one is not tried again either
        self._dont_retry = dont_retry
        self._next = 0
        self._inside: str | None = None  # the transactional step whose fn is running, if any
        # the execution's spans (wfctl/tracing.py); None, as a rule: tracing is off
        self._tracing = tracing

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` as step ``name``; on replay return its stored result.

        The result must be JSON-serialisable; it is durably stored before the next step starts
        (or the workflow ends), and what this call returns is the stored JSON value (the same on
        the first run and on replay). If ``fn`` raises, this raises ``wfctl.StepError``: caught,
        the failure is history (a replay raises it again here without calling ``fn``); uncaught,
        the attempt fails and the step runs again in the next one. ``fn``'s ``@wfctl.step``
        options (retries, backoff, timeout) say how many tries it gets first, and how long each
        may take; an ``async def`` function is awaited on the worker's event loop.
        """
        options = options_of(fn)
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None and stored.retrying is None:
            return cast(T, _replayed(stored))  # the stored JSON value (untyped): what fn returned, decoded
        self._journal.boundary(number, name)
        if self._tracing is None:
            return self._run_step(number, name, stored, options, fn, args, kwargs)
        with self._tracing.step(number, name):
            return self._run_step(number, name, stored, options, fn, args, kwargs)

    def _run_step(
        self,
        number: int,
        name: str,
        stored: RecordedStep | None,
        options: StepOptions,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        """Step ``number``'s tries, then its checkpoint (``step``, once it is to run)."""
        started = self._journal.now()
        refused = _step_name_problem(name)
        if refused is not None:  # the database would refuse its checkpoint: do not run it
            raise StepFailed(number, name[:MAX_STEP_NAME], ValueError(refused), started)
        made = tries_before(stored, self.attempt)
        tracing = self._tracing if options.retries else None  # a span per try: steps with retries
        while True:  # the tries: the first one returns, as a rule
            made += 1
            try:
                if tracing is None:
                    result = self._journal.call(name, fn, args, kwargs, options)
                else:
                    result = tracing.attempt(name, made, self._journal.call, name, fn, args, kwargs, options)
                break
            except Exception as raised:
                self._failed_try(number, name, options, raised, made, started)
        try:
            encoded = jsonvalue.dumps(result)
        except jsonvalue.UnstorableJSON as exc:
            error = TypeError(
                f"step {name!r} returned a value of type {type(result).__name__} "
                f"that cannot be stored as JSON ({exc})"
            )
            raise StepFailed(number, name, error, started) from exc
        self._journal.record(number, name, encoded, started, made)
        if type(result) in _SAME_AS_STORED:
            return cast(T, result)  # what json.loads(encoded) would make of it: the value itself
        return cast(T, json.loads(encoded))  # untyped JSON: the result as a replay will return it

    def _failed_try(
        self, number: int, name: str, options: StepOptions, error: Exception, made: int, started: datetime
    ) -> None:
        """Try ``made`` of step ``number`` raised ``error``. Return when the next try is due (a
        short backoff waited where the step runs); raise Parked when the run parks until then
        (a long one: the journal keeps the count for the next execution, see wfctl/tries.py),
        or the StepError the workflow gets when no try is left."""
        delay = next_delay(made, options, self._retryable(error))
        if delay is None:
            raise self._failed(number, name, error, started, made) from error
        retrying = Retrying(made, failure_of(error), self.attempt)
        self._journal.retry_later(number, name, retrying, delay, started)

    def _retryable(self, error: Exception) -> bool:
        """A failed try is tried again unless it raised a ``PermanentError`` or a type the
        workflow's ``dont_retry`` names."""
        return not isinstance(error, (PermanentError, *self._dont_retry))

    def sleep(self, duration: str | float | timedelta) -> None:
        """Sleep durably: the wake time is checkpointed and the worker slot is freed; the
        workflow continues on any worker once the time has come."""
        if isinstance(duration, str):
            delta = parse_duration(duration, what="sleep duration")
        elif isinstance(duration, timedelta):
            delta = duration
        else:
            delta = timedelta(seconds=float(duration))
        number = self._claim_number(SLEEP_STEP)
        stored = _not_retrying(self._journal.recorded(number), "ctx.sleep")
        if stored is not None:
            wake_at = datetime.fromisoformat(stored.output["wake_at"])
            if wake_at > self._journal.now():
                # woken early (a retry of a sleeping run): leave again until the same time
                self._journal.repark(wake_at)
                raise Parked(wake_at)
            return
        self._journal.boundary(number, SLEEP_STEP)
        now = self._journal.now()
        wake_at = now + delta
        self._journal.park(number, SLEEP_STEP, json.dumps({"wake_at": wake_at.isoformat()}), wake_at)
        raise Parked(wake_at)

    def transaction(self, name: str, fn: Callable[[Any], T], /) -> T:
        """Run ``fn(conn)`` as step ``name`` inside the PostgreSQL transaction that writes the
        step's checkpoint (fenced by this run's lease): the application's own writes through
        ``conn`` to the same database commit with the checkpoint, so they happen exactly once
        however the worker dies. ``conn`` is in a transaction: do not commit or roll back, and
        start no other step inside ``fn``. The result must be JSON-serialisable; what this call
        returns is the stored JSON value, and a replay returns it without calling ``fn``.
        ``fn``'s ``@wfctl.step`` retries apply, each try a transaction of its own; a ``timeout``
        is refused (InvalidInput): set ``statement_timeout`` in the transaction instead."""
        options = options_of(fn)
        if options.timeout is not None:
            raise InvalidInput(
                f"transactional step {name!r}: its function has a timeout (@wfctl.step(timeout=...)), "
                "which a transaction cannot have: an abandoned try would hold its transaction and "
                "its locks open beside the next one; bound its statements with "
                "SET LOCAL statement_timeout inside fn instead"
            )
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None and stored.retrying is None:
            return cast(T, _replayed(stored))  # the stored JSON value (untyped): what fn returned, decoded
        self._journal.boundary(number, name)
        if self._tracing is None:
            return self._run_transaction(number, name, stored, options, fn)
        with self._tracing.step(number, name, "transaction"):
            return self._run_transaction(number, name, stored, options, fn)

    def _run_transaction(
        self,
        number: int,
        name: str,
        stored: RecordedStep | None,
        options: StepOptions,
        fn: Callable[[Any], T],
    ) -> T:
        """Transactional step ``number``'s tries, each with its checkpoint."""
        refused = _step_name_problem(name)
        if refused is not None:
            raise StepFailed(number, name[:MAX_STEP_NAME], ValueError(refused), self._journal.now())
        started = self._journal.now()

        def call(conn: Any) -> str:
            self._inside = name
            try:
                result = fn(conn)
            finally:
                self._inside = None
            try:
                return jsonvalue.dumps(result)
            except jsonvalue.UnstorableJSON as exc:
                raise _Unstorable(
                    f"transactional step {name!r} returned a value of type {type(result).__name__} "
                    f"that cannot be stored as JSON ({exc})"
                ) from exc

        # each try: fn and the checkpoint in one transaction (fn raised: nothing was committed);
        # the journal gives the stored JSON value, untyped: fn's result as a replay returns it
        made = tries_before(stored, self.attempt)
        tracing = self._tracing if options.retries else None  # a span per try: steps with retries
        while True:
            made += 1
            try:
                if tracing is None:
                    return cast(T, self._journal.transaction(number, name, call, made))
                tried = tracing.attempt(name, made, self._journal.transaction, number, name, call, made)
                return cast(T, tried)
            except _Unstorable as error:  # a bug, as for ctx.step: the attempt fails
                raise StepFailed(number, name, error, started) from error
            except Exception as error:
                self._failed_try(number, name, options, error, made, started)

    def _failed(
        self, number: int, name: str, error: Exception, started: datetime, tries: int = 1
    ) -> StepError:
        """Step ``number``'s function raised ``error`` (at its last try, ``tries``): the
        StepError the workflow gets, told to the journal (history once the workflow goes past
        it)."""
        failure = failure_of(error)
        self._journal.fail_step(number, name, failure, started, tries)
        return StepError(number, name, failure.error_type, failure.message)

    # -- coordination ---------------------------------------------------------------------------

    def recv(self, topic: str, timeout: str | float | timedelta | None = None) -> Any:
        """Wait for the oldest unconsumed message on ``topic`` and return its payload, or
        ``None`` once ``timeout`` has passed (no timeout: wait as long as it takes). The
        workflow is parked meanwhile; taking the message is checkpointed, so it is consumed
        exactly once and a replay returns the same payload."""
        check_label(topic, "a message topic")
        seconds = timeout_seconds(timeout, "recv timeout")
        output = self._coordinate(Op.RECV, recv_step_name(topic), {"topic": topic, "timeout": seconds})
        return output.get("payload")

    def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for ``wfctl.get_event`` / ``wfctl event`` (the latest
        value wins); checkpointed like a step."""
        check_label(key, "an event key")
        try:
            encoded = jsonvalue.dumps(value)
        except jsonvalue.UnstorableJSON as exc:
            raise InvalidInput(f"event {key!r}: the value cannot be stored as JSON ({exc})") from exc
        self._coordinate(Op.SET_EVENT, f"set_event:{key}", {"key": key, "value": encoded})

    def start_child(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        key: str | None = None,
        priority: int | None = None,
        timeout: str | float | timedelta | None = None,
    ) -> str:
        """Start a child workflow and return its id. Checkpointed: a replay returns the same id
        and never starts a second child. Its deadline is at most this workflow's."""
        params = _children(workflow_type, [input], [key], priority, timeout)
        params.update(many=False, trace_context=self._child_trace_context())
        return str(self._coordinate(Op.START_CHILDREN, f"start_child:{workflow_type}", params))

    def start_children(
        self,
        workflow_type: str,
        inputs: list[Any],
        *,
        keys: list[str | None] | None = None,
        priority: int | None = None,
        timeout: str | float | timedelta | None = None,
    ) -> list[str]:
        """Start one child per input, all in one step (one transaction: a fan-out of thousands
        costs one round trip), and return their ids in input order."""
        if keys is not None and len(keys) != len(inputs):
            raise InvalidInput(f"start_children: {len(keys)} keys for {len(inputs)} inputs")
        params = _children(workflow_type, list(inputs), keys or [None] * len(inputs), priority, timeout)
        params.update(many=True, trace_context=self._child_trace_context())
        ids = self._coordinate(Op.START_CHILDREN, f"start_children:{workflow_type}", params)
        return [str(i) for i in ids]

    def wait(
        self, ids: str | UUID | list[str] | list[UUID], timeout: str | float | timedelta | None = None
    ) -> Any:
        """Wait until the child workflow(s) finished: the output for one id, the outputs in
        order for a list. A child that failed or was cancelled raises ``wfctl.ChildFailed``
        here; ``timeout`` passing raises ``wfctl.WaitTimeout``."""
        wanted: list[str | UUID]
        if isinstance(ids, str | UUID):
            single, wanted = True, [ids]
        else:
            single, wanted = False, list(ids)
        try:
            id_list = [str(UUID(str(i))) for i in wanted]
        except ValueError:
            raise InvalidInput(f"ctx.wait takes workflow ids, not {ids!r}") from None
        seconds = timeout_seconds(timeout, "wait timeout")
        output = self._coordinate(Op.JOIN, WAIT_STEP, {"ids": id_list, "timeout": seconds})
        if output.get("timed_out"):
            raise WaitTimeout(
                f"{output.get('unfinished')} of {len(id_list)} child workflow(s) had not finished "
                "when the wait timed out"
            )
        children = output["children"]
        for child in children:
            if child["status"] != COMPLETED:
                raise ChildFailed(child["id"], child["status"], child.get("error"))
        outputs = [child["output"] for child in children]
        return outputs[0] if single else outputs

    def run_child(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        key: str | None = None,
        priority: int | None = None,
        timeout: str | float | timedelta | None = None,
    ) -> Any:
        """``start_child`` then ``wait``: the child's output."""
        return self.wait(self.start_child(workflow_type, input, key=key, priority=priority, timeout=timeout))

    def patched(self, name: str) -> bool:
        """True where this run reaches this point on the current code; False when it replays
        a run that passed this point on code without the patch, or that parked in a wait at
        this point on that code. Deploy the changed steps as
        ``if ctx.patched("name"): new steps`` ``else: old steps``."""
        check_label(name, "a patch name")
        marker = PATCH_PREFIX + name
        self._not_inside_transaction(marker)
        number = self._next + 1
        stored = self._journal.recorded(number)
        if stored is not None:
            if stored.name == marker:
                self._next = number
                return True
            return False  # old code ran another step here: keep to the old path
        if self._journal.parked_wait(number) is not None:
            return False  # the run parked in a wait here on old code: keep to the old path
        self._next = number
        self._journal.boundary(number, marker)
        self._journal.record(number, marker, "true", self._journal.now())
        return True

    def _child_trace_context(self) -> str | None:
        """The trace context the children started here carry: this execution's current span,
        when runs are traced (None: they are not)."""
        if self._tracing is None:
            return None
        from wfctl.tracing import current_context

        return current_context()

    def _coordinate(self, op: Op, name: str, params: dict[str, Any]) -> Any:
        number = self._claim_number(name)
        stored = _not_retrying(self._journal.recorded(number), operation(op).api)
        if stored is not None:
            return stored.output
        self._journal.boundary(number, name)
        output = self._journal.coordinate(op, number, name, params)
        if self._tracing is not None and op is Op.RECV and isinstance(output, dict) and "message" in output:
            self._tracing.received(number, params["topic"], output["message"], output.get("trace_context"))
        return output

    def _not_inside_transaction(self, name: str) -> None:
        """Steps do not nest in a transactional step's fn: theirs would be another transaction
        (committed or not whatever fn's does) and a step number a replay does not reach."""
        if self._inside is not None:
            raise PermanentError(
                f"step {name!r} was started inside the function of transactional step "
                f"{self._inside!r}: a step cannot run inside another step's transaction (call it "
                "before or after ctx.transaction)"
            )

    def _claim_number(self, name: str) -> int:
        self._not_inside_transaction(name)
        while True:
            self._next += 1
            number = self._next
            stored = self._journal.recorded(number)
            # a patch marker whose ctx.patched() call the code no longer makes: pass over it
            if stored is None or stored.name == name or not stored.name.startswith(PATCH_PREFIX):
                break
        if stored is not None and stored.name != name:
            raise DeterminismError(
                f"workflow code changed under a running workflow: step {number} was "
                f"{stored.name!r} when it was checkpointed, the code now calls {name!r}"
            )
        if stored is None:
            waited = self._journal.parked_wait(number)
            if waited is not None and waited != name:
                raise DeterminismError(
                    f"workflow code changed under a running workflow: step {number} was "
                    f"{waited!r} when the run parked there, the code now calls {name!r}"
                )
        return number


def _children(
    workflow_type: str,
    inputs: list[Any],
    keys: list[str | None],
    priority: int | None,
    timeout: str | float | timedelta | None,
) -> dict[str, Any]:
    """The parameters of a start_children step, checked."""
    from wfctl.validate import check_int, check_key, check_type, encode_input

    check_type(workflow_type)
    for key in keys:
        check_key(key)
    check_int(priority, "priority")
    seconds = timeout_seconds(timeout, "child timeout")
    return {
        "type": workflow_type,
        "inputs": [encode_input(value) for value in inputs],
        "keys": keys,
        "priority": priority,
        "timeout": seconds,
        "timeout_error": timeout_message(timeout, seconds),
    }


class _Unstorable(TypeError):
    """A transactional step's result that cannot be stored as JSON."""


def _not_retrying(stored: RecordedStep | None, api: str) -> RecordedStep | None:
    """``stored`` for a step that is not ``ctx.step`` or ``ctx.transaction``: a ``retrying``
    record (tries of a step function) there means the code changed under the run."""
    if stored is not None and stored.retrying is not None:
        raise DeterminismError(
            f"workflow code changed under a running workflow: step {stored.number} ({stored.name!r}) "
            f"was a step function being retried when the run parked, the code now calls {api}"
        )
    return stored


def _replayed(stored: RecordedStep) -> Any:
    """What a replayed step gives: its stored output, or the StepError it raised and the
    workflow handled."""
    if stored.failure is not None:
        raise StepError(stored.number, stored.name, stored.failure.error_type, stored.failure.message)
    return stored.output


def check_label(value: object, what: str) -> str:
    """A message topic, event key or patch name: 1 to MAX_TOPIC characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_TOPIC:
        raise InvalidInput(f"{what} must have 1 to {MAX_TOPIC} characters, not {str(value)[:40]!r}")
    return value


def _step_name_problem(name: str) -> str | None:
    """Why the database cannot store ``name`` as a step name, or None."""
    if not isinstance(name, str) or not name:
        return f"a step name must be a non-empty string, not {name!r}; the step was not run"
    if len(name) > MAX_STEP_NAME:
        return (
            f"step name {name[:40]!r}... has {len(name)} characters, over the {MAX_STEP_NAME} "
            "that are stored; the step was not run"
        )
    return None
