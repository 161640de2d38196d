"""Submitting workflows from applications: ``wfctl.submit`` (one) and ``submit_many`` (a batch).

Input checks live here too, so the CLI and the Python API refuse the same things: text that is
not UTF-8 or holds NUL, JSON that is malformed, nested too deep or bigger than the limit.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import IO, Any
from uuid import UUID

import psycopg

from wfctl import jsonvalue
from wfctl.connection import connect
from wfctl.durations import as_seconds, parse_duration
from wfctl.errors import InvalidState, UsageError, WfctlError
from wfctl.queries import q
from wfctl.registry import MAX_TYPE_LENGTH

SUBMIT_TRIES = 5  # insert-or-find rounds for one idempotency key before giving up

#: Largest input accepted, in bytes of JSON (documented in the README): the user's bytes, the
#: text as given in UTF-8 (for a Python value: its compact JSON in UTF-8). Postgres would take
#: far more; a workflow input this big is almost always a mistake (pass a reference instead).
MAX_INPUT_BYTES = 1_000_000
#: Deepest nesting of arrays and objects accepted in an input: Python (the worker, ``show``)
#: reads JSON recursively, and fails somewhere below 1,000 levels.
MAX_JSON_DEPTH = 500
#: Python reads at most this many digits into an int (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4300
#: An --input-file holds at most this many lines and bytes (README: submit). It is read line by
#: line; the validated inputs wait in a temporary file (in memory up to SPOOL_MEMORY bytes)
#: until every line has been checked, then go to the database in batches.
MAX_FILE_LINES = 1_000_000
MAX_FILE_BYTES = 1_000_000_000
SPOOL_MEMORY = 4_000_000
_BOM = b"\xef\xbb\xbf"
#: One read: a line at the limit, plus a BOM, CR and LF, plus one byte to see that it is longer.
_LINE_READ = MAX_INPUT_BYTES + len(_BOM) + 2 + 1
_JSON_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class Submitted:
    id: UUID
    created: bool  # False: the idempotency key was used before, this is the existing workflow


def encode_input(value: Any, where: str = "workflow input") -> str:
    """The JSON text to store for a Python value; UsageError when it cannot be stored or is over
    the limit (measured as the value's compact JSON in UTF-8, not wfctl's escaped text)."""
    text = _encode(value, where)
    if len(text) > MAX_INPUT_BYTES:  # escaped text is never shorter than the value's own bytes
        try:
            compact = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            compact = text
        check_input_size(compact, where)
    return text


def _encode(value: Any, where: str) -> str:
    check_depth(value, where)
    try:
        return jsonvalue.dumps(value)
    except jsonvalue.UnstorableJSON as exc:
        raise UsageError(f"{where} cannot be stored: {exc}") from None


def check_input_size(text: str, where: str = "workflow input") -> None:
    """Refuse JSON text over MAX_INPUT_BYTES, counted as the UTF-8 bytes of ``text`` as given."""
    size = len(utf8(text, where))
    if size > MAX_INPUT_BYTES:
        raise UsageError(f"{where} is {size} bytes, over the limit of {MAX_INPUT_BYTES} bytes")


def check_depth(value: Any, where: str = "workflow input") -> None:
    """Refuse arrays and objects nested deeper than MAX_JSON_DEPTH (iteratively: any depth, and
    a value that contains itself, are refused rather than overflowing the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise UsageError(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep (the limit)")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))


def utf8(text: str, what: str) -> bytes:
    """``text`` in UTF-8; UsageError when it cannot be (a command-line argument with bytes that
    are not UTF-8 arrives with surrogate escapes, U+DC80 to U+DCFF)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        offset = len(text[: exc.start].encode("utf-8", "surrogatepass"))
        if 0xDC80 <= char <= 0xDCFF:
            detail = f"byte 0x{char - 0xDC00:02x} at byte {offset}"
        else:
            detail = f"an unpaired surrogate U+{char:04X} at byte {offset}"
        raise UsageError(f"{what} is not valid UTF-8 ({detail})") from None


def check_text(value: str | None, what: str) -> None:
    """A string that goes to a text column (a type, a key, a reason, a filter): valid UTF-8 and no
    NUL, which PostgreSQL cannot store."""
    if value is None:
        return
    utf8(value, what)
    if "\x00" in value:
        raise UsageError(f"{what} contains a NUL character, which PostgreSQL cannot store")


INT32_MAX = 2**31 - 1


def check_int(value: int | None, what: str, *, minimum: int = -INT32_MAX - 1) -> None:
    """priority and max_retries are integer columns: refuse what they cannot hold."""
    if value is not None and minimum == 0 and value < 0:
        raise UsageError(f"{what} cannot be negative")
    if value is not None and not minimum <= value <= INT32_MAX:
        raise UsageError(f"{what} must be between {minimum} and {INT32_MAX}, not {value}")


def check_type(workflow_type: str) -> None:
    if not workflow_type or len(workflow_type) > MAX_TYPE_LENGTH:
        raise UsageError(f"a workflow type must have 1 to {MAX_TYPE_LENGTH} characters")
    check_text(workflow_type, "the workflow type")


def check_key(key: str | None) -> None:
    check_text(key, "the idempotency key")


def _delay(delay: str | float | timedelta | None) -> float | None:
    """The delay as exact seconds (for ``make_interval(secs => ...)``), or None."""
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        result = delay
    elif isinstance(delay, str):
        result = parse_duration(delay, what="delay")
    else:
        result = timedelta(seconds=float(delay))
    if result < timedelta(0):
        raise UsageError("a delay cannot be negative")
    return as_seconds(result)


@contextmanager
def _connection(conn_or_dsn: psycopg.Connection[Any] | str) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(conn_or_dsn, str):
        with connect(conn_or_dsn) as conn:
            yield conn
    else:
        yield conn_or_dsn


def submit(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_type: str,
    input: Any = None,
    *,
    key: str | None = None,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
) -> UUID:
    """Enqueue one workflow and return its id. With ``key``, submitting again returns the same id
    and stores nothing new. Runs in the connection's current transaction when there is one, so
    an application can enqueue atomically with its own writes."""
    return submit_one(
        conn_or_dsn,
        workflow_type,
        encode_input(input),
        key=key,
        delay=delay,
        priority=priority,
        max_retries=max_retries,
    ).id


def submit_one(
    conn_or_dsn: psycopg.Connection[Any] | str,
    workflow_type: str,
    input_json: str | None,
    *,
    key: str | None = None,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
) -> Submitted:
    """Enqueue one workflow whose input is JSON text already checked by ``parse_input`` or
    ``encode_input`` (the size limit applies to what the user gave, not to this text)."""
    check_type(workflow_type)
    check_key(key)
    check_int(priority, "priority")
    check_int(max_retries, "max_retries", minimum=0)
    params = {
        "workflow_type": workflow_type,
        "input": input_json,
        "key": key,
        "delay": _delay(delay),
        "priority": priority,
        "max_retries": max_retries,
    }
    with _connection(conn_or_dsn) as conn:
        for _ in range(SUBMIT_TRIES):
            row = conn.execute(q("client.submit"), params).fetchone()
            if row is not None:
                return Submitted(id=row[0], created=True)
            # the key was used before (perhaps by a submit committed a moment ago)
            row = conn.execute(q("client.submit_existing"), {"key": key}).fetchone()
            if row is not None:
                return Submitted(id=row[0], created=False)
            # the conflicting workflow was deleted (pruned) between the two statements: again
        # the key conflicts with a row this transaction's snapshot cannot see (a REPEATABLE READ
        # or SERIALIZABLE transaction that began before that workflow was committed)
        raise InvalidState(
            f"idempotency key {key!r} belongs to a workflow this transaction cannot see yet "
            "(its snapshot is older); submit again in a new transaction"
        )


def submit_many(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    inputs_json: Sequence[str | None],
    *,
    delay: str | float | timedelta | None = None,
    priority: int = 0,
    max_retries: int | None = None,
) -> list[UUID]:
    """Enqueue a batch of one type in a single statement (the caller owns the transaction)."""
    check_type(workflow_type)
    check_int(priority, "priority")
    check_int(max_retries, "max_retries", minimum=0)
    rows = conn.execute(
        q("client.submit_many"),
        {
            "workflow_type": workflow_type,
            "inputs": list(inputs_json),
            "delay": _delay(delay),
            "priority": priority,
            "max_retries": max_retries,
        },
    ).fetchall()
    return [r[0] for r in rows]


def _load(text: str, where: str) -> Any:
    """json.loads, with what it cannot read turned into one-line errors; JSONDecodeError (bad
    syntax) is left to the caller, which words it for its source."""
    try:
        # numbers with a fraction or exponent as Decimal: stored as the user wrote them
        # (a float would turn 0.12345678901234567890123 into 0.12345678901234568)
        value = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise UsageError(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep (the limit)") from None
    except ValueError:  # an integer longer than Python reads (sys.get_int_max_str_digits)
        raise UsageError(
            f"{where} holds an integer of more than {MAX_INT_DIGITS} digits, more than Python reads"
        ) from None
    return value


def parse_input(text: str) -> str:
    """Validate one JSON document given on the command line; return the JSON text to store.
    The size limit counts ``text`` itself, in UTF-8."""
    where = "workflow input"
    check_input_size(text, "JSON input")
    try:
        value = _load(text, where)
    except json.JSONDecodeError as exc:
        raise UsageError(f"malformed JSON input: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return _encode(value, where)


@dataclass
class SpooledInputs:
    """The validated inputs of an --input-file, one JSON text per line of a temporary file."""

    file: IO[bytes]
    count: int

    def batches(self, rows: int, size: int) -> Iterator[list[str]]:
        """The inputs in file order, in lists of at most ``rows`` inputs and about ``size`` bytes
        (a single input bigger than ``size`` is a batch of its own)."""
        self.file.seek(0)
        batch: list[str] = []
        total = 0
        for line in self.file:
            if batch and (len(batch) >= rows or total + len(line) > size):
                yield batch
                batch, total = [], 0
            batch.append(line[:-1].decode("utf-8"))
            total += len(line)
        if batch:
            yield batch

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> SpooledInputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(stream: IO[bytes], source: str) -> SpooledInputs:
    """Read and validate a JSON Lines stream (one workflow input per non-blank line) before
    anything is stored. Lines end at LF only (U+2028 or U+0085 inside a string are text); a
    UTF-8 BOM at the start is skipped. The stream is read a line at a time, each line at most
    MAX_INPUT_BYTES (so /dev/zero or a huge line without a newline stops at the limit), the
    file at most MAX_FILE_LINES lines and MAX_FILE_BYTES bytes. The first bad line is an
    error naming its number; then nothing is stored."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115 - returned, or closed below
    try:
        count = _spool_jsonl(stream, source, spool)
    except BaseException:
        spool.close()
        raise
    if not count:
        spool.close()
        raise UsageError(f"{source} holds no workflow input (expected one JSON value per line)")
    return SpooledInputs(spool, count)  # type: ignore[arg-type]


def _spool_jsonl(stream: IO[bytes], source: str, spool: IO[bytes]) -> int:
    nothing = "nothing was submitted"
    count = offset = number = 0
    while True:
        try:
            raw = stream.readline(_LINE_READ)
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror}; {nothing}") from None
        if not raw:
            return count
        number += 1
        start, offset = offset, offset + len(raw)
        if number > MAX_FILE_LINES:
            raise UsageError(
                f"{source} has more than {MAX_FILE_LINES} lines, the limit for one file: split it; {nothing}"
            )
        if offset > MAX_FILE_BYTES:
            raise UsageError(
                f"{source} has more than {MAX_FILE_BYTES} bytes, the limit for one file: split it; {nothing}"
            )
        complete = raw.endswith(b"\n")
        cut = not complete and len(raw) == _LINE_READ  # the line goes on: it is over the limit
        if number == 1 and raw.startswith(_BOM):
            raw, start = raw[len(_BOM) :], start + len(_BOM)
        body = raw[:-1] if complete else raw
        if body.endswith(b"\r"):
            body = body[:-1]
        where = f"{source} line {number}"
        if len(body) > MAX_INPUT_BYTES:
            size = f"more than {MAX_INPUT_BYTES} bytes" if cut else f"{len(body)} bytes"
            raise UsageError(f"{where} is {size}, over the limit of {MAX_INPUT_BYTES} bytes; {nothing}")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{source} is not valid UTF-8 (line {number}, byte offset {start + exc.start}); {nothing}"
            ) from None
        if not text.strip(_JSON_WHITESPACE):
            continue
        try:
            value = _load(text, where)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno}); {nothing}") from None
        except UsageError as exc:
            raise UsageError(f"{exc.message}; {nothing}") from None
        try:
            encoded = _encode(value, where)
        except UsageError as exc:
            raise UsageError(f"{exc.message}; {nothing}") from None
        try:
            spool.write(encoded.encode("utf-8") + b"\n")
        except OSError as exc:
            raise WfctlError(
                f"cannot keep the checked inputs of {source} in a temporary file in "
                f"{tempfile.gettempdir()} (set TMPDIR to change it): {exc.strerror}; {nothing}"
            ) from None
        count += 1


def parse_jsonl(data: bytes, source: str) -> list[str]:
    """Validate a JSON Lines document held in memory (see ``read_jsonl``, which streams); return
    the JSON text to store for each input."""
    with read_jsonl(io.BytesIO(data), source) as spool:
        return [text for batch in spool.batches(MAX_FILE_LINES, MAX_FILE_BYTES) for text in batch]
