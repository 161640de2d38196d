"""The workflow-facing API: ``Context.step``, ``Context.sleep`` and the coordination steps
(messages, events, child workflows, patches) over a small journal.

The context knows nothing of Postgres or of the worker: it asks a ``Journal`` what step N
recorded before, and tells it to record a new result (durable before the next step starts).
The worker implements the journal over Postgres; a test can implement it in memory.

Control flow that must not be caught by a workflow's ``except Exception`` (losing the lease,
parking for a sleep, being released at shutdown, a failed step) uses BaseException subclasses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from wfctl import jsonvalue
from wfctl.durations import parse_duration, timeout_message, timeout_seconds
from wfctl.errors import ChildFailed, InvalidInput, PermanentError, WaitTimeout
from wfctl.words import COMPLETED, FINISHED

T = TypeVar("T")

SLEEP_STEP = "sleep"
MAX_STEP_NAME = 200  # workflow_steps.step_name is varchar(200)
MAX_TOPIC = 150  # a message topic or an event key (workflow_messages / workflow_events checks)
PATCH_PREFIX = "patch:"  # the step name of a ctx.patched() marker
WAIT_STEP = "wait"  # the step name of ctx.wait (a join on children)


def recv_step_name(topic: str) -> str:
    """The step name of ``ctx.recv(topic)``."""
    return f"recv:{topic}"


@dataclass(frozen=True)
class RecordedStep:
    number: int
    name: str
    output: Any  # decoded JSON


class Journal(Protocol):
    """What a Context needs from whoever runs it."""

    def recorded(self, number: int) -> RecordedStep | None:
        """The completed step ``number`` from an earlier attempt, if any."""

    def parked_wait(self, number: int) -> str | None:
        """The step name of the wait (a recv, a wait for children) that the run parked in as
        step ``number`` and has not got past, if any: no step is stored there yet, but the run
        reached that point, and a replay must meet the same wait there."""

    def boundary(self) -> None:
        """Called before a new step starts; raises Released or Lost to stop the run here."""

    def record(self, number: int, name: str, output_json: str, started_at: datetime) -> None:
        """Store step ``number``'s result durably. It may return before the commit: the next
        ``boundary``, ``park`` or the run's end waits for it (and raises Lost if it failed)."""

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        """Store the sleep step and make the workflow runnable again at ``wake_at``."""

    def repark(self, wake_at: datetime) -> None:
        """A replayed sleep whose wake time is still ahead: leave again until ``wake_at``
        (the sleep step is stored already; nothing else is written)."""

    def now(self) -> datetime:
        """The current time, by the database's clock where there is one."""

    def transaction(self, number: int, name: str, fn: Callable[[Any], str]) -> Any:
        """Run ``fn(conn)`` (it returns the step's output as JSON text) and checkpoint step
        ``number`` in one database transaction; return the stored output (decoded JSON)."""

    def coordinate(self, op: str, number: int, name: str, params: dict[str, Any]) -> Any:
        """Run coordination step ``number`` (``op``: recv, join, start_children, set_event) and
        return the output it checkpointed (decoded JSON); raise Parked when the workflow must
        wait (a message, children). The output and the step's effect commit together."""


class ControlFlow(BaseException):
    """Base of the exceptions that stop a workflow function from the outside."""


class Lost(ControlFlow):
    """The lease was lost: the workflow was recovered, cancelled or released elsewhere."""


class Released(ControlFlow):
    """The worker is shutting down: stop at this step boundary, another worker resumes."""


class Parked(ControlFlow):
    """The workflow waits (until ``wake_at``, or ``None``: until woken); its worker slot is free
    meanwhile. ``waiting_for`` says for what: a sleep, a message, children."""

    def __init__(self, wake_at: datetime | None, waiting_for: str = "sleep") -> None:
        super().__init__(wake_at)
        self.wake_at = wake_at
        self.waiting_for = waiting_for


class StepFailed(ControlFlow):
    """A step raised: the attempt fails. The original exception is ``__cause__``."""

    def __init__(self, number: int, name: str, error: BaseException, started_at: datetime) -> None:
        super().__init__(f"step {number} ({name!r}) failed: {type(error).__name__}: {error}")
        self.number = number
        self.name = name
        self.error = error
        self.started_at = started_at


class DeterminismError(ControlFlow):
    """The code changed under a running workflow: step N's name differs from the stored one,
    or from the wait the run parked in at step N."""


class Context:
    """Passed to every workflow function as its first argument."""

    def __init__(
        self,
        workflow_id: UUID | str,
        workflow_type: str,
        input: Any,
        attempt: int,
        journal: Journal,
    ) -> None:
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.input = input
        self.attempt = attempt
        self._journal = journal
        self._next = 0
        self._inside: str | None = None  # the transactional step whose fn is running, if any

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` as step ``name``; on replay return its stored result.

        The result must be JSON-serialisable; it is durably stored before the next step starts
        (or the workflow ends), and what this call returns is the stored JSON value (the same on
        the first run and on replay).
        """
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None:
            return stored.output  # type: ignore[no-any-return]
        self._journal.boundary()
        started = self._journal.now()
        refused = _step_name_problem(name)
        if refused is not None:  # the database would refuse its checkpoint: do not run it
            raise StepFailed(number, name[:MAX_STEP_NAME], ValueError(refused), started)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            raise StepFailed(number, name, exc, started) from exc
        try:
            encoded = jsonvalue.dumps(result)
        except jsonvalue.UnstorableJSON as exc:
            error = TypeError(
                f"step {name!r} returned a value of type {type(result).__name__} "
                f"that cannot be stored as JSON ({exc})"
            )
            raise StepFailed(number, name, error, started) from exc
        self._journal.record(number, name, encoded, started)
        return json.loads(encoded)  # type: ignore[no-any-return]

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
        stored = self._journal.recorded(number)
        if stored is not None:
            wake_at = datetime.fromisoformat(stored.output["wake_at"])
            if wake_at > self._journal.now():
                # woken early (a retry of a sleeping run): leave again until the same time
                self._journal.repark(wake_at)
                raise Parked(wake_at)
            return
        self._journal.boundary()
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
        returns is the stored JSON value, and a replay returns it without calling ``fn``."""
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None:
            return stored.output  # type: ignore[no-any-return]
        self._journal.boundary()
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
                raise TypeError(
                    f"transactional step {name!r} returned a value of type {type(result).__name__} "
                    f"that cannot be stored as JSON ({exc})"
                ) from exc

        try:
            return self._journal.transaction(number, name, call)  # type: ignore[no-any-return]
        except ControlFlow:
            raise
        except Exception as exc:
            raise StepFailed(number, name, exc, started) from exc

    # -- coordination ---------------------------------------------------------------------------

    def recv(self, topic: str, timeout: str | float | timedelta | None = None) -> Any:
        """Wait for the oldest unconsumed message on ``topic`` and return its payload, or
        ``None`` once ``timeout`` has passed (no timeout: wait as long as it takes). The
        workflow is parked meanwhile; taking the message is checkpointed, so it is consumed
        exactly once and a replay returns the same payload."""
        check_label(topic, "a message topic")
        seconds = timeout_seconds(timeout, "recv timeout")
        output = self._coordinate("recv", recv_step_name(topic), {"topic": topic, "timeout": seconds})
        return output.get("payload")

    def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for ``wfctl.get_event`` / ``wfctl event`` (the latest
        value wins); checkpointed like a step."""
        check_label(key, "an event key")
        try:
            encoded = jsonvalue.dumps(value)
        except jsonvalue.UnstorableJSON as exc:
            raise InvalidInput(f"event {key!r}: the value cannot be stored as JSON ({exc})") from exc
        self._coordinate("set_event", f"set_event:{key}", {"key": key, "value": encoded})

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
        return str(
            self._coordinate("start_children", f"start_child:{workflow_type}", {**params, "many": False})
        )

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
        ids = self._coordinate("start_children", f"start_children:{workflow_type}", {**params, "many": True})
        return [str(i) for i in ids]

    def wait(
        self, ids: str | UUID | list[str] | list[UUID], timeout: str | float | timedelta | None = None
    ) -> Any:
        """Wait until the child workflow(s) finished: the output for one id, the outputs in
        order for a list. A child that failed or was cancelled raises ``wfctl.ChildFailed``
        here; ``timeout`` passing raises ``wfctl.WaitTimeout``."""
        single = isinstance(ids, str | UUID)
        wanted = [ids] if single else list(ids)  # type: ignore[list-item]
        try:
            id_list = [str(UUID(str(i))) for i in wanted]
        except ValueError:
            raise InvalidInput(f"ctx.wait takes workflow ids, not {ids!r}") from None
        seconds = timeout_seconds(timeout, "wait timeout")
        output = self._coordinate("join", WAIT_STEP, {"ids": id_list, "timeout": seconds})
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
        self._journal.boundary()
        self._journal.record(number, marker, "true", self._journal.now())
        return True

    def _coordinate(self, op: str, name: str, params: dict[str, Any]) -> Any:
        number = self._claim_number(name)
        stored = self._journal.recorded(number)
        if stored is not None:
            return stored.output
        self._journal.boundary()
        return self._journal.coordinate(op, number, name, params)

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


class MemoryJournal:
    """A journal in memory, for testing workflow functions and replay rules without a database."""

    def __init__(self, steps: dict[int, RecordedStep] | None = None) -> None:
        self.steps: dict[int, RecordedStep] = dict(steps or {})
        self.parked_until: datetime | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.messages: dict[str, list[Any]] = {}  # topic -> payloads not yet received
        self.events: dict[str, Any] = {}
        # child id -> {"type", "input", "status", "output", "error"}; set "status" (and
        # "output" or "error") to finish a child, then run the workflow again
        self.children: dict[str, dict[str, Any]] = {}
        self.connection: Any = None  # what ctx.transaction's fn receives (a test may set one)
        # the wait the run last parked in: (step number, step name), as the worker records it
        self.waiting: tuple[int, str] | None = None

    def recorded(self, number: int) -> RecordedStep | None:
        return self.steps.get(number)

    def parked_wait(self, number: int) -> str | None:
        if self.waiting is None or self.waiting[0] != number or number in self.steps:
            return None
        return self.waiting[1]

    def boundary(self) -> None:
        return None

    def record(self, number: int, name: str, output_json: str, started_at: datetime) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json))

    def park(self, number: int, name: str, output_json: str, wake_at: datetime) -> None:
        self.steps[number] = RecordedStep(number, name, json.loads(output_json))
        self.parked_until = wake_at

    def repark(self, wake_at: datetime) -> None:
        self.parked_until = wake_at

    def now(self) -> datetime:
        return self.clock()

    def transaction(self, number: int, name: str, fn: Callable[[Any], str]) -> Any:
        output = json.loads(fn(self.connection))
        self.steps[number] = RecordedStep(number, name, output)
        return output

    def coordinate(self, op: str, number: int, name: str, params: dict[str, Any]) -> Any:
        output: Any
        if op == "recv":
            waiting = self.messages.get(params["topic"])
            if waiting:
                output = {"payload": waiting.pop(0)}
            elif params["timeout"] == 0:
                output = {"payload": None, "timed_out": True}
            else:
                self.waiting = (number, name)
                raise Parked(None, f"a message on {params['topic']!r}")
        elif op == "set_event":
            self.events[params["key"]] = json.loads(params["value"])
            output = {"key": params["key"], "value": self.events[params["key"]]}
        elif op == "start_children":
            ids = []
            for text in params["inputs"]:
                child = str(UUID(int=len(self.children) + 1))
                self.children[child] = {
                    "type": params["type"],
                    "input": json.loads(text),
                    "status": "pending",
                }
                ids.append(child)
            output = ids if params["many"] else ids[0]
        elif op == "join":
            found = [self.children.get(i, {"status": "missing"}) for i in params["ids"]]
            unfinished = sum(1 for c in found if c["status"] not in (*FINISHED, "missing"))
            if unfinished and params["timeout"] == 0:
                output = {"timed_out": True, "unfinished": unfinished}
            elif unfinished:
                self.waiting = (number, name)
                raise Parked(None, f"{unfinished} child workflow(s)")
            else:
                output = {
                    "children": [
                        {"id": i, "status": c["status"], "output": c.get("output"), "error": c.get("error")}
                        for i, c in zip(params["ids"], found, strict=True)
                    ]
                }
        else:
            raise ValueError(f"unknown coordination step {op!r}")
        self.steps[number] = RecordedStep(number, name, output)
        return output
