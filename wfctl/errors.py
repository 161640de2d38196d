"""wfctl's exceptions: one type per exit code, so the CLI maps errors to codes in one place.

The exit codes are part of the public contract (README, "Exit codes") and never change meaning.
"""

from __future__ import annotations


class WfctlError(Exception):
    """Base class: a problem wfctl explains to the user in one line."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class UsageError(WfctlError):
    """Bad input on the command line: malformed JSON, a bad duration, an invalid option value."""

    exit_code = 2


class ConfigError(WfctlError):
    """An unreadable or invalid wfctl.toml, or a DSN that cannot be parsed."""

    exit_code = 3


class ConnectionFailed(WfctlError):
    """The database cannot be reached, or refuses our credentials."""

    exit_code = 4


class SchemaError(WfctlError):
    """The database has no wfctl schema, or one older or newer than this wfctl understands."""

    exit_code = 5


class NotFound(WfctlError):
    """An id or name that does not exist."""

    exit_code = 6


class InvalidState(WfctlError):
    """The request does not fit the object's state (cancel a finished workflow, retry a running one)."""

    exit_code = 7


class PermissionDenied(WfctlError):
    """The database role lacks a privilege the command needs."""

    exit_code = 8


class AppError(WfctlError):
    """The workflow application module cannot be imported or registers nothing."""

    exit_code = 9


class ServerError(WfctlError):
    """The embedded PostgreSQL server could not be set up, started or stopped."""

    exit_code = 10


EXIT_INTERRUPTED = 130

#: code -> meaning, rendered into the README's exit-code table and checked by a test.
EXIT_CODES: dict[int, str] = {
    0: "success (including 'nothing to do')",
    1: "unexpected internal error (run with --debug and report it)",
    UsageError.exit_code: "bad input: malformed JSON, bad duration, invalid option or argument",
    ConfigError.exit_code: "invalid configuration: unreadable or invalid wfctl.toml, bad DSN syntax",
    ConnectionFailed.exit_code: "database unreachable, or authentication failed",
    SchemaError.exit_code: "schema missing, too old or too new: run `wfctl init` (or upgrade wfctl)",
    NotFound.exit_code: "no such workflow (or other object)",
    InvalidState.exit_code: "the object is in the wrong state for this request",
    PermissionDenied.exit_code: "the database role lacks a needed privilege",
    AppError.exit_code: "the --app module does not import or registers no workflow",
    ServerError.exit_code: "the embedded PostgreSQL could not be started or stopped",
    EXIT_INTERRUPTED: "interrupted (SIGINT twice)",
}
