"""``wfctl submit``: enqueue one workflow, or a JSON Lines file of them in one transaction."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import IO, Annotated, Any
from uuid import UUID

import psycopg
import typer

from wfctl import client, limits, validate
from wfctl.cli import jsonlines, render
from wfctl.cli.common import ConfigOpt, DsnOpt, JsonOpt, Session
from wfctl.durations import parse_duration
from wfctl.errors import InvalidInput

SUBMIT_BATCH = 1000  # workflows per INSERT of an --input-file ...
SUBMIT_BATCH_BYTES = 4_000_000  # ... and at most about this many bytes of input JSON


def submit(
    workflow_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="The workflow type, as registered with @wfctl.workflow.")
    ],
    input_json: Annotated[
        str | None, typer.Argument(metavar="JSON", help="The input, one JSON value.")
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option("--input-file", help="JSON Lines file (or - for stdin): one workflow per line."),
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Idempotency key: the same key twice stores one workflow.")
    ] = None,
    delay: Annotated[
        str | None, typer.Option("--delay", help="Start no earlier than this from now (10m, 2h).")
    ] = None,
    priority: Annotated[int, typer.Option("--priority", help="Higher runs first.")] = 0,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            help='Deadline from now (30m, 1h): past it the run fails with "timed out after 1h".',
            show_default=False,
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option("--max-retries", help="Retries after the first attempt (default: the type's)."),
    ] = None,
    concurrency_key: Annotated[
        str | None,
        typer.Option(
            "--concurrency-key",
            help="Run under the type's per-key limit with this key (customer-42); claims rotate "
            "across keys. With --input-file: every line.",
            show_default=False,
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Refuse a TYPE no worker has registered (instead of a warning)."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", hidden=True, help="Accepted for compatibility: submit without checking TYPE."
        ),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Enqueue workflows and print their ids. One id per line on stdout (one line per input
    line with --input-file)."""
    session = Session.create(dsn, config, json)
    if input_json is not None and input_file is not None:
        raise InvalidInput("give the input either as JSON or with --input-file, not both")
    if input_file is not None and key is not None:
        raise InvalidInput("--key applies to a single workflow, not to --input-file")
    validate.check_int(priority, "--priority")
    validate.check_int(max_retries, "--max-retries", minimum=0)
    validate.check_type(workflow_type)
    validate.check_key(key)
    _check_concurrency_key(concurrency_key)
    if strict and force:
        raise InvalidInput("--strict and --force contradict each other: give one")
    delay_value = parse_duration(delay, what="--delay") if delay is not None else None
    if timeout is not None:  # checked here for the option's name; the library keeps the text
        parse_duration(timeout, what="--timeout", allow_zero=False)
        timeout = timeout.strip()
    if input_file is None:
        single = jsonlines.parse_input(input_json) if input_json is not None else "null"
        with session.connect() as conn:
            unknown = None if force else _unknown_type(conn, workflow_type, strict=strict)
            done = client.submit_one(
                conn,
                workflow_type,
                single,
                key=key,
                delay=delay_value,
                priority=priority,
                max_retries=max_retries,
                timeout=timeout,
                concurrency_key=concurrency_key,
            )
            if not done.created:
                render.notice(
                    f"key {key!r} was used before: this is the existing workflow, nothing new was stored"
                )
        if unknown and done.created:
            render.warn(unknown)
        if session.json:
            render.print_json({"id": str(done.id), "created": done.created})
        else:
            render.line(str(done.id))
        return
    source = "stdin" if input_file == "-" else input_file
    with _open_input_file(input_file) as stream:
        spool = jsonlines.read_jsonl(stream, source)  # every line checked before anything is stored
    with spool, session.connect() as conn:
        unknown = None if force else _unknown_type(conn, workflow_type, strict=strict)
        ids = _submit_batches(
            conn, workflow_type, spool, delay_value, priority, max_retries, timeout, concurrency_key
        )
    if unknown and ids:
        render.warn(unknown)
    if session.json:
        render.print_json({"ids": [str(i) for i in ids], "count": len(ids)})
    else:
        sys.stdout.write("".join(f"{i}\n" for i in ids))
        sys.stdout.flush()
        render.notice(f"submitted {len(ids)} workflow(s) of type {workflow_type!r}")


def _check_concurrency_key(value: str | None) -> None:
    """--concurrency-key: 1 to MAX_KEY_LENGTH characters of UTF-8 text without NUL (the column's
    CHECK), refused before anything is stored."""
    if value is None:
        return
    validate.check_text(value, "--concurrency-key")
    if not 1 <= len(value) <= limits.MAX_KEY_LENGTH:
        raise InvalidInput(
            f"--concurrency-key must have 1 to {limits.MAX_KEY_LENGTH} characters, not {len(value)}"
        )


@contextmanager
def _open_input_file(path: str) -> Iterator[IO[bytes]]:
    """The --input-file as a binary stream, read line by line (``-``: stdin)."""
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InvalidInput(f"cannot read --input-file {path}: {exc.strerror}") from None
    with stream:
        yield stream


def _unknown_type(conn: psycopg.Connection[Any], workflow_type: str, *, strict: bool) -> str | None:
    """The warning to give once the workflow is stored when no worker has registered
    ``workflow_type`` but some worker has registered others (a typo?), else None. Submitting
    before the first worker ever started is the normal order of things (``init``, ``submit``,
    ``worker``): nothing to compare with, nothing said. With ``strict``, an unregistered type is
    an InvalidInput instead, before anything is stored."""
    known = client.known_types(conn)
    if workflow_type in known:
        return None
    listed = f"known: {', '.join(known)}" if known else "no worker has registered any type yet"
    if strict:
        raise InvalidInput(
            f"unknown workflow type {workflow_type!r}: no worker has registered it ({listed}); "
            "--strict refuses it"
        )
    if not known:
        return None
    return (
        f"no worker has registered workflow type {workflow_type!r} ({listed}): it stays pending "
        "until a worker that runs it starts"
    )


def _submit_batches(
    conn: psycopg.Connection[Any],
    workflow_type: str,
    inputs: jsonlines.SpooledInputs,
    delay: timedelta | None,
    priority: int,
    max_retries: int | None,
    timeout: str | None,
    concurrency_key: str | None,
) -> list[UUID]:
    ids: list[UUID] = []
    with conn.transaction(), render.progress("submitting", total=inputs.count) as advance:
        for chunk in inputs.batches(SUBMIT_BATCH, SUBMIT_BATCH_BYTES):
            ids.extend(
                client.submit_many(
                    conn,
                    workflow_type,
                    chunk,
                    delay=delay,
                    priority=priority,
                    max_retries=max_retries,
                    timeout=timeout,
                    concurrency_key=concurrency_key,
                )
            )
            advance(len(chunk))
    return ids


def register(app: typer.Typer) -> None:
    app.command()(submit)
