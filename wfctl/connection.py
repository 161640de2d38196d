"""Connecting: open a psycopg connection for a DSN, translate driver errors into wfctl errors,
and keep passwords out of everything we print. Which DSN (``--dsn``, the config file, the
embedded server...) is wfctl.config's business: this module knows nothing of it. A schema of
wfctl's own travels in the DSN as ``options=-c search_path=NAME`` (``with_search_path``), and
``connect`` checks that the server applied it (a pooler may drop startup options)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import conninfo, errors, pq

from wfctl.errors import (
    ConfigError,
    ConnectionFailed,
    PermissionDenied,
    SchemaError,
    WfctlError,
)
from wfctl.queries import q

MASK = "***"

#: Connection keys libpq itself treats as secret (shown as "*" in its dialogs), besides every
#: key ending in "password" (password, sslpassword).
_SECRET_KEYS = frozenset({"oauth_client_secret"})


def is_secret(key: str) -> bool:
    """Whether a connection key holds a secret: ``password``, ``sslpassword``, any other key
    ending in ``password``, and the keys libpq masks (``oauth_client_secret``)."""
    key = key.lower()
    return key.endswith("password") or key in _SECRET_KEYS or key in _libpq_secret_keys()


@cache
def _libpq_secret_keys() -> frozenset[str]:
    try:
        return frozenset(o.keyword.decode() for o in pq.Conninfo.get_defaults() if o.dispchar == b"*")
    except Exception:  # an unusual libpq: the names above still apply
        return frozenset()


def _params(dsn: str) -> dict[str, Any] | None:
    """The keys of a DSN (either form), or None when it does not parse."""
    try:
        return conninfo.conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeError, ValueError):
        return None


def dsn_secrets(dsn: str) -> dict[str, str]:
    """The secrets a DSN carries, by key (empty also when the DSN does not parse)."""
    params = _params(dsn) or {}
    return {k: str(v) for k, v in params.items() if is_secret(k) and v}


def has_secret(dsn: str) -> bool:
    """Whether a DSN carries a password or another secret (then a file holding it is private)."""
    return bool(dsn_secrets(dsn))


def mask_dsn(dsn: str | None) -> str:
    """A DSN fit to print: every secret (password, sslpassword, ...) replaced by ***, whatever
    form the DSN had."""
    if dsn is None:
        return "(embedded)"
    params = _params(dsn)
    if params is None:
        return scrub(dsn, dsn)
    for key in params:
        if is_secret(key) and params[key] is not None:
            params[key] = MASK
    return conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None})


_KV_SECRET = re.compile(r"(?:password|oauth_client_secret)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]*)@")


def _secrets(dsn: str) -> list[str]:
    """Everything in ``dsn`` that could be (part of) a secret, longest first."""
    found: list[str] = list(dsn_secrets(dsn).values())
    for match in _KV_SECRET.finditer(dsn):
        value = match.group(1).strip("'")
        found.append(value)
        found.append(value.split("&")[0])  # a URL's query string: ?sslpassword=...&sslmode=...
        # an unquoted password with a space: libpq quotes the part after it in its error
        tail = dsn[match.end() :].split()
        if tail:
            found.append(tail[0])
    for match in _URL_PASSWORD.finditer(dsn):
        found.append(match.group(1))
        found.extend(match.group(1).split())
    return sorted({s for s in found if s}, key=len, reverse=True)


def scrub(text: str, *dsns: str | None) -> str:
    """Remove every secret (or fragment of one) of ``dsns`` from ``text``."""
    for dsn in dsns:
        if not dsn:
            continue
        for secret in _secrets(dsn):
            text = text.replace(secret, MASK)
    return text


#: libpq's environment variable for each key ``describe`` shows.
_ENV = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "user": "PGUSER",
    "dbname": "PGDATABASE",
}


def describe(dsn: str) -> str:
    """A short, secret-free name for the server a DSN points at: ``user@host:port/db``, with
    what the DSN leaves out taken from libpq's PG* variables as libpq would. Without a host
    libpq uses its default Unix socket: that is what it says then, not "localhost"."""
    params = _params(dsn)
    if params is None:
        return mask_dsn(dsn)
    for key, env in _ENV.items():
        if not params.get(key) and os.environ.get(env):
            params[key] = os.environ[env]
    service = params.get("service") or os.environ.get("PGSERVICE")
    host = params.get("host") or params.get("hostaddr")
    if not host and service:
        return f"the server of service {service!r}"
    where = str(host) if host else "(default Unix socket)"
    port = params.get("port")
    if port:
        where = f"{where}:{port}"
    user = params.get("user")
    db = params.get("dbname")
    return f"{str(user) + '@' if user else ''}{where}{'/' + str(db) if db else ''}"


def describe_connection(conn: psycopg.Connection[Any]) -> str:
    """What an open connection really talks to: ``user@host:port/db``, where a Unix socket's
    host is its directory (``postgres@/var/run/postgresql:5432/app``)."""
    info = conn.info
    host = info.host or info.hostaddr or "(default Unix socket)"
    return f"{info.user}@{host}:{info.port}/{info.dbname}"


#: A search_path ``connect`` can check: one plain lower-case identifier, as wfctl sets it.
_PLAIN_SCHEMA = re.compile(r"[a-z_][a-z0-9_]*")
_SEARCH_PATH_OPTION = re.compile(r"(?:^|\s)(?:-c\s*|--)search_path=(\S+)")


def with_search_path(dsn: str, schema: str | None) -> str:
    """``dsn`` with libpq ``options`` that set ``search_path`` to ``schema``, after the options
    the DSN (or else ``PGOPTIONS``) already gives; ``dsn`` itself when ``schema`` is None, or
    when it does not parse (``connect`` then says why)."""
    if schema is None:
        return dsn
    params = _params(dsn)
    if params is None:
        return dsn
    existing = params.get("options")
    if existing is None:
        existing = os.environ.get("PGOPTIONS", "")
    params["options"] = f"{existing} -c search_path={schema}".strip()
    return conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None})


def requested_search_path(options: str | None) -> str | None:
    """The search_path that libpq ``options`` set last, when it is one plain schema name."""
    if not options:
        return None
    found = _SEARCH_PATH_OPTION.findall(options)
    if not found or not _PLAIN_SCHEMA.fullmatch(found[-1]):
        return None
    return str(found[-1])


def _check_search_path(conn: psycopg.Connection[Any], wanted: str, dsn: str) -> None:
    """Refuse a connection on which the server did not apply the search_path the DSN asked for:
    wfctl would read and write another schema's tables (PgBouncer's ignore_startup_parameters
    drops ``options`` silently)."""
    try:
        row = conn.execute(q("admin.search_path")).fetchone()
        if not conn.autocommit:
            conn.rollback()
    except psycopg.Error as exc:
        conn.close()
        raise translate(exc, dsn) from None
    refused = search_path_refused(row, wanted, dsn)
    if refused is not None:
        conn.close()
        raise refused


def search_path_refused(row: tuple[Any, ...] | None, wanted: str, dsn: str) -> ConfigError | None:
    """The error for a connection whose search_path (``row``: what ``admin.search_path`` read)
    is not the schema ``wanted`` that the DSN asked for; None when it is."""
    got = str(row[0]) if row else ""
    if got == wanted:
        return None
    return ConfigError(
        f"connected to {describe(dsn)}, but its search_path is {got!r}, not the schema {wanted!r} "
        "that the DSN's options ask for: something between (a pooler such as PgBouncer) dropped them",
        f"give them search_path {wanted} another way, such as ALTER ROLE ... SET search_path = {wanted}",
    )


@dataclass(frozen=True)
class Target:
    """What a DSN becomes before wfctl connects to it: the conninfo given to libpq (with wfctl's
    application name and connect timeout where the DSN sets none), and the schema its options
    put on the search_path (a plain name, which the connection is checked against; else None)."""

    conninfo: str
    search_path: str | None


def dsn_target(dsn: str, *, application_name: str = "wfctl", connect_timeout: int = 10) -> Target:
    """Parse ``dsn`` for ``connect`` (and ``wfctl.aio``'s connect); ``ConfigError`` when it
    does not parse."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid DSN: {scrub(_first_line(exc), dsn)}") from None
    except UnicodeError:
        raise ConfigError("invalid DSN: it is not valid UTF-8") from None
    params.setdefault("application_name", application_name)
    params.setdefault("connect_timeout", str(connect_timeout))
    options = params.get("options")  # text, as every value parsed from a DSN (ConnParam allows int too)
    return Target(
        conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None}),
        requested_search_path(options if isinstance(options, str) else None),
    )


@contextmanager
def connecting(dsn: str) -> Iterator[None]:
    """A failure to open a connection to ``dsn`` as the wfctl error it means, without the
    driver's traceback or the DSN's secrets."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, dsn) from None
    except UnicodeError as exc:  # a host name (DSN or PGHOST) that is not valid text
        raise ConfigError(f"cannot connect to {describe(dsn)}: {scrub(_first_line(exc), dsn)}") from None


def connect(
    dsn: str,
    *,
    autocommit: bool = True,
    prepare: bool = False,
    application_name: str = "wfctl",
    connect_timeout: int = 10,
    **kwargs: Any,
) -> psycopg.Connection[Any]:
    """Open a connection, raising a wfctl error (never a driver traceback) when it fails.

    Server-side prepared statements are off unless ``prepare`` is true: a one-shot command
    gains nothing from them, and behind a transaction pooler (PgBouncer 1.18) they would land on
    a server connection that the next transaction may not get. The worker opts in once it has
    checked that it talks to PostgreSQL directly (``behind_pooler``).
    """
    where = dsn_target(dsn, application_name=application_name, connect_timeout=connect_timeout)
    with connecting(dsn):
        conn = psycopg.connect(
            where.conninfo, autocommit=autocommit, prepare_threshold=5 if prepare else None, **kwargs
        )
    if where.search_path is not None:
        _check_search_path(conn, where.search_path, dsn)
    return conn


def set_local(conn: psycopg.Connection[Any], setting: str, value: str) -> None:
    """``SET LOCAL``: a server setting for the current transaction only."""
    conn.execute(q("admin.set_local"), {"setting": setting, "value": value})


#: How long a command that locks rows others need may sit frozen inside its transaction before
#: the server ends it (workers use their --dead-after instead).
DEFAULT_HOLD = 30.0


def hold_locks_at_most(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Inside a transaction that locks rows others need (a schedule being fired, a limit being
    declared): should this process freeze in it (SIGSTOP, a paused VM, a debugger) for longer
    than ``seconds`` between two statements, the server ends the session, and the transaction
    with its locks, instead of holding them until the process wakes."""
    set_local(conn, "idle_in_transaction_session_timeout", f"{max(1, round(seconds * 1000))}ms")


def behind_pooler(conn: psycopg.Connection[Any]) -> bool:
    """True when a connection pooler sits between us and PostgreSQL: the backend pid that the
    server reported at connect time is not the pid of the backend running our statements
    (PgBouncer hands its clients a made-up one)."""
    return pooled(conn.execute(q("admin.backend_pid")).fetchone(), conn.info.backend_pid)


def pooled(row: tuple[Any, ...] | None, backend_pid: int) -> bool:
    """Whether the pid the statement ``admin.backend_pid`` read (``row``) is not the one the
    server reported at connect time (``backend_pid``): a pooler answered."""
    return row is None or int(row[0]) != backend_pid


#: SQLSTATEs that mean the session is gone: class 08 (connection exception) and the server
#: shutting down or being restarted (admin_shutdown, crash_shutdown, cannot_connect_now).
_SESSION_GONE = ("57P01", "57P02", "57P03")


def connection_lost(conn: psycopg.Connection[Any], exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (reconnect and re-send), as opposed to a
    statement the server refused on a live connection: a statement or lock timeout, a
    deadlock, a value out of range, a program limit, a full disk. Re-sending a refused
    statement would only be refused again."""
    if conn.closed or conn.broken:
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    state = getattr(exc, "sqlstate", None)
    if state is None:  # raised by the client itself: the connection failed under it
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in _SESSION_GONE


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    text = text.removeprefix("connection failed: ")
    return text.splitlines()[0].strip() if text else type(exc).__name__


def translate(exc: BaseException, dsn: str | None = None) -> WfctlError:
    """Turn a psycopg error into the wfctl error a user should see (one line, no password)."""
    if isinstance(exc, WfctlError):
        return exc
    line = scrub(_first_line(exc), dsn)
    where = describe(dsn) if dsn is not None else "the database"
    if isinstance(exc, errors.InsufficientPrivilege):
        return PermissionDenied(f"permission denied: {line}")
    if isinstance(exc, errors.UndefinedTable | errors.UndefinedFunction):
        return SchemaError(f"the wfctl schema is missing or incomplete ({line})", "run `wfctl init`")
    if isinstance(exc, psycopg.OperationalError):
        if "password authentication failed" in line or "no password supplied" in line:
            return ConnectionFailed(f"authentication failed for {where}: {line}")
        if "unsupported startup parameter: options" in line:
            return ConnectionFailed(
                f"cannot connect to {where}: {line}",
                "a pooler refused the options that set wfctl's schema; see the README, 'A schema of its own'",
            )
        return ConnectionFailed(f"cannot connect to {where}: {line}")
    if isinstance(exc, psycopg.ProgrammingError) and "connection info" in line:
        return ConfigError(f"invalid DSN: {line}")
    return WfctlError(f"database error: {line}")
