"""Coordination from the command line: ``wfctl send`` a message to a workflow, read an ``event``
it published, ``wait`` for its result. Each is one call of wfctl/coordination.py; the waits are
woken by NOTIFY (the library LISTENs), and their exit codes say how a wait ended."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any

import psycopg
import typer
from psycopg.types.json import set_json_loads

from wfctl import coordination, keys, words
from wfctl.cli import jsonlines, render
from wfctl.cli.common import ConfigOpt, DsnOpt, IdOrKeyArg, JsonOpt, KeyOpt, Session, workflow_named
from wfctl.context import check_label
from wfctl.durations import parse_duration
from wfctl.errors import InvalidInput, NotFound, WorkflowCancelled, WorkflowFailed

IdArg = Annotated[str, typer.Argument(metavar="ID", help="The workflow's id.")]


def _seconds(text: str | None, option: str) -> float | None:
    """A wait's duration in seconds (None: not given; 0s: look once, do not wait)."""
    if text is None:
        return None
    return parse_duration(text, what=option).total_seconds()


def _exact(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Stored JSON read with its fractional numbers as Decimal, printed with every digit stored
    (as ``show`` does), not rounded through a float."""
    set_json_loads(lambda data: json.loads(data, parse_float=Decimal), conn)
    return conn


def _first_line(text: str | None) -> str | None:
    if not text:
        return text
    return text.strip().split("\n")[0].rstrip("\r")


def send(
    workflow_id: Annotated[
        str | None,
        typer.Argument(
            metavar="ID",
            help="The workflow's id (a UUID); left out with --to-key: wfctl send --to-key KEY TOPIC [JSON].",
            show_default=False,
        ),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Argument(
            metavar="TOPIC", help="What ctx.recv(TOPIC) waits for (required).", show_default=False
        ),
    ] = None,
    payload: Annotated[
        str | None, typer.Argument(metavar="JSON", help="The payload, one JSON value (default: none).")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="The message's own idempotency key: the same key twice stores one message. "
            "The workflow's key is --to-key.",
            show_default=False,
        ),
    ] = None,
    to_key: Annotated[
        str | None,
        typer.Option(
            "--to-key",
            help="Send to the workflow submitted with this idempotency key (submit --key), "
            "instead of one named by ID.",
            show_default=False,
        ),
    ] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Send a message to a workflow. Its ctx.recv(TOPIC) returns the payload; the workflow
    is named by its ID or by --to-key."""
    if to_key is not None and payload is None:  # `send --to-key KEY TOPIC [JSON]`: no ID given
        workflow_id, topic, payload = None, workflow_id, topic
    given = workflow_named(workflow_id, to_key, key_option="--to-key")
    if topic is None:
        raise InvalidInput(
            "missing TOPIC: wfctl send ID TOPIC [JSON], or wfctl send --to-key KEY TOPIC [JSON]"
        )
    session = Session.create(dsn, config, json)
    coordination.check_message(topic, key)
    encoded = None if payload is None else jsonlines.parse_input(payload, "message payload", "JSON payload")
    with session.connect() as conn:
        sent = coordination.send_json(conn, given, topic, encoded, key=key, to_key=to_key)
    wid = sent.workflow_id
    if session.json:
        render.print_json({"id": sent.id, "workflow_id": str(wid), "topic": topic, "created": sent.created})
    elif sent.created:
        render.line(f"sent message {sent.id} to {wid} on {topic!r}")
    else:
        render.line(
            f"message {sent.id} to {wid} on {topic!r} was sent before with key {key!r}: "
            "nothing new was stored"
        )


def event(
    workflow_id: IdArg,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key given to ctx.set_event(KEY, value).")],
    wait: Annotated[
        str | None,
        typer.Option(
            "--wait",
            help="Not set yet: wait up to this long for it (30s, 5m); exit 13 if it does not come.",
            show_default=False,
        ),
    ] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Print the latest value a workflow published under KEY, as JSON."""
    session = Session.create(dsn, config, json)
    wid = words.parse_id(workflow_id)
    check_label(key, "an event key")
    seconds = _seconds(wait, "--wait")
    with session.connect() as conn:
        try:
            value = coordination.get_event(_exact(conn), wid, key, timeout=seconds or None, default=...)
        except NotFound as exc:
            if seconds or "has not set" not in str(exc):
                raise
            raise NotFound(f"{exc} (yet: --wait waits for it)") from None
    if session.json:
        render.print_json({"workflow_id": str(wid), "key": key, "value": value})
    else:
        render.print_json(value)


def wait(
    workflow_id: IdOrKeyArg = None,
    key: KeyOpt = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            "--timeout",
            help="Give up after this long (30s, 5m; 0s: look once) with exit 13. Default: wait as "
            "long as it takes.",
            show_default=False,
        ),
    ] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Wait until a workflow finishes and print its output. The workflow is named by its ID
    or by --key; its output is printed as JSON (exit 0), or the command exits 11 (failed), 12
    (cancelled) or 13 (--timeout passed)."""
    session = Session.create(dsn, config, json)
    given = workflow_named(workflow_id, key)
    seconds = _seconds(timeout, "--timeout")
    with session.connect() as conn:
        wid = keys.run_id(conn, given, key)
        try:
            output = coordination.result(_exact(conn), wid, timeout=seconds)
        except WorkflowFailed as exc:
            raise WorkflowFailed(wid, _first_line(exc.error)) from None
        except WorkflowCancelled as exc:
            raise WorkflowCancelled(wid, _first_line(exc.reason)) from None
    if session.json:
        render.print_json({"id": str(wid), "status": words.COMPLETED, "output": output})
    else:
        render.print_json(output)


def register(app: typer.Typer) -> None:
    app.command()(send)
    app.command()(event)
    app.command()(wait)
