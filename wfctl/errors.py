"""wfctl's exceptions, the library's contract: ``wfctl.submit()``, ``@wfctl.workflow`` and the
engine raise these, never the CLI's exit codes or a bare ``ValueError``.

Every class is a ``WfctlError``; ``InvalidInput`` is also a ``ValueError``, so code written
against ``except ValueError`` keeps working. What each means for a process's exit status is the
CLI's business and lives in one place, ``wfctl/exits.py``.
"""

from __future__ import annotations


class WfctlError(Exception):
    """Base class: a problem wfctl explains in one line (``hint`` says what to do about it)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class InvalidInput(WfctlError, ValueError):
    """A value wfctl cannot accept: malformed or unstorable JSON, a bad duration, a workflow type
    or key it cannot store, an out-of-range number, a bad decorator argument."""


class ConfigError(WfctlError):
    """An unreadable, invalid or refused wfctl.toml, no project where one is needed, or a DSN
    that cannot be parsed."""


class ConnectionFailed(WfctlError):
    """The database cannot be reached, or refuses our credentials."""


class SchemaError(WfctlError):
    """The database has no wfctl schema, or one older or newer than this wfctl understands."""


class NotFound(WfctlError):
    """An id or name that does not exist."""


class InvalidState(WfctlError):
    """The request does not fit the object's state (cancel a finished workflow, retry a running one)."""


class Fenced(InvalidState):
    """A write on behalf of a run was refused because the run's lease moved on: another worker
    (a later epoch) holds it, or it was cancelled or recovered. Nothing of the write was stored."""


class PermissionDenied(WfctlError):
    """The database role lacks a privilege the command needs."""


class AppError(WfctlError):
    """The workflow application module cannot be imported or registers nothing."""


class ServerError(WfctlError):
    """The embedded PostgreSQL server could not be set up, started or stopped."""


class PermanentError(Exception):
    """Raise it from a step or a workflow function to fail the run at once: no retry, whatever
    ``max_retries`` says. The message is kept as the run's error. (Not a ``WfctlError``: it is
    the workflow's own verdict, not a problem wfctl reports.)"""


class StepError(Exception):
    """``ctx.step`` or ``ctx.transaction``: the step's function raised. The workflow may catch it
    and go on (a compensating step, say: a saga); the failure is then part of the run's history,
    and every replay of the run raises the same ``StepError`` at the same step without calling
    the function, so the workflow takes the same path. Uncaught, it fails the attempt as any
    error does: retried under the workflow's policy (not at all for a ``PermanentError`` or a
    type its ``dont_retry`` names), and the step runs again in the next attempt.

    ``number`` and ``name`` are the step's, ``error_type`` and ``message`` the original
    exception's type name and message. ``__cause__`` is the original exception in the execution
    where the function raised (a replay has only its type name and message). (Not a
    ``WfctlError``: it is the workflow's own failure, not a problem wfctl reports.)"""

    def __init__(self, number: int, name: str, error_type: str, message: str) -> None:
        super().__init__(f"step {number} ({name!r}) failed: {error_type}: {message}")
        self.number = number
        self.name = name
        self.error_type = error_type
        self.message = message


class WorkflowFailed(WfctlError):
    """``wfctl.result``: the workflow ended ``failed`` (``error`` is its one-line error)."""

    def __init__(self, workflow_id: object, error: str | None) -> None:
        super().__init__(f"workflow {workflow_id} failed: {error or 'no error recorded'}")
        self.workflow_id = workflow_id
        self.error = error


class WorkflowCancelled(WfctlError):
    """``wfctl.result``: the workflow was cancelled."""

    def __init__(self, workflow_id: object, reason: str | None) -> None:
        super().__init__(f"workflow {workflow_id} was cancelled: {reason or 'cancelled'}")
        self.workflow_id = workflow_id
        self.reason = reason


class WaitTimeout(WfctlError, TimeoutError):
    """A wait gave up at its timeout: ``wfctl.result``, ``wfctl.get_event`` with a timeout and a
    ``default`` of ``...``, or ``ctx.wait`` inside a workflow. Also a ``TimeoutError``."""


class ChildFailed(PermanentError):
    """``ctx.wait``: a child workflow ended ``failed`` or ``cancelled`` (or was deleted). The
    workflow may catch it; uncaught, it fails the parent at once (a replay would raise it again,
    so retrying cannot help)."""

    def __init__(self, workflow_id: str, status: str, error: str | None) -> None:
        super().__init__(f"child workflow {workflow_id} {status}: {error or 'no error recorded'}")
        self.workflow_id = workflow_id
        self.status = status
        self.error = error


class StepTimeout(TimeoutError):
    """A try of a step outlived the ``timeout`` of its ``@wfctl.step`` options (``step 'charge'
    timed out after 20s``): the worker stopped waiting for it and counts a failed try, retried
    as any other. When no try is left, the workflow meets it as a ``StepError`` whose
    ``error_type`` is ``"StepTimeout"``. Also a ``TimeoutError``. (Not a ``WfctlError``: it is
    the step's failure, not a problem wfctl reports.)"""
