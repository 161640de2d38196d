"""Exit statuses of the ``wfctl`` process: the one place where an exception becomes a number.

The codes are part of the public contract (README, "Exit codes", checked by a test) and never
change meaning. The CLI (``wfctl/cli/app.py``) maps every error through ``code_for``; the
worker's watchdog uses the same numbers when it has to end the process itself.
"""

from __future__ import annotations

from wfctl.errors import (
    AppError,
    ConfigError,
    ConnectionFailed,
    InvalidInput,
    InvalidState,
    NotFound,
    PermissionDenied,
    SchemaError,
    ServerError,
    WaitTimeout,
    WfctlError,
    WorkflowCancelled,
    WorkflowFailed,
)

OK = 0
INTERNAL = 1
USAGE = 2
CONFIG = 3
CONNECTION = 4
SCHEMA = 5
NOT_FOUND = 6
INVALID_STATE = 7
PERMISSION = 8
APP = 9
SERVER = 10
WORKFLOW_FAILED = 11
WORKFLOW_CANCELLED = 12
TIMED_OUT = 13
INTERRUPTED = 130

#: exception class -> exit code; a subclass takes its nearest listed ancestor's code
#: (``Fenced`` is an ``InvalidState``).
_BY_CLASS: dict[type[WfctlError], int] = {
    InvalidInput: USAGE,
    ConfigError: CONFIG,
    ConnectionFailed: CONNECTION,
    SchemaError: SCHEMA,
    NotFound: NOT_FOUND,
    InvalidState: INVALID_STATE,
    PermissionDenied: PERMISSION,
    AppError: APP,
    ServerError: SERVER,
    WorkflowFailed: WORKFLOW_FAILED,
    WorkflowCancelled: WORKFLOW_CANCELLED,
    WaitTimeout: TIMED_OUT,
}


def code_for(exc: BaseException) -> int:
    """The exit code for an error wfctl raised (INTERNAL for anything it does not know)."""
    for cls in type(exc).__mro__:
        code = _BY_CLASS.get(cls)
        if code is not None:
            return code
    return INTERNAL


#: code -> meaning, rendered into the README's exit-code table and checked by a test.
EXIT_CODES: dict[int, str] = {
    OK: "success (including 'nothing to do')",
    INTERNAL: "unexpected internal error (run with --debug and report it)",
    USAGE: "bad input: malformed JSON, bad duration, invalid option or argument, a missing one",
    CONFIG: (
        "invalid configuration: unreadable, invalid or refused wfctl.toml, bad DSN syntax, no project here"
    ),
    CONNECTION: "database unreachable, or authentication failed",
    SCHEMA: "schema missing, too old or too new: run `wfctl init` (or upgrade wfctl)",
    NOT_FOUND: "no such workflow (or other object)",
    INVALID_STATE: "the object is in the wrong state for this request",
    PERMISSION: "the database role lacks a needed privilege",
    APP: "the --app module does not import or registers no workflow",
    SERVER: "the embedded PostgreSQL could not be started or stopped",
    WORKFLOW_FAILED: "`wfctl wait`: the workflow failed",
    WORKFLOW_CANCELLED: "`wfctl wait`: the workflow was cancelled",
    TIMED_OUT: "`wfctl wait` / `wfctl event --wait`: the timeout passed first",
    INTERRUPTED: "interrupted (SIGINT twice)",
}
