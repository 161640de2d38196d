"""Values the shell completions offer from the database: the workflow types workers registered,
the ids of the newest runs, the topic a run waits on, the schedule names.

``wfctl complete-values KIND [PREFIX]`` (hidden from the help) prints them one per line for the
scripts in ``completions/``. A completion runs at every Tab: it never starts the embedded server
(a stopped one offers nothing), gives up after a second, and prints nothing at all when no
database answers or anything else goes wrong, so no error ever lands in the user's command line.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import psycopg
import typer

from wfctl.cli import render
from wfctl.cli.common import global_options
from wfctl.config import resolve_target, running_dsn
from wfctl.config_file import load_config
from wfctl.queries import q

KINDS = ("types", "ids", "topics", "schedules")
LIMIT = 50  # values offered at most
TIMEOUT_SECONDS = 1  # to connect, and for the statement


def _dsn() -> str | None:
    """The configured database's DSN, as other commands resolve it, or None for an embedded
    server that is not running (completing must not start it)."""
    glob = global_options()
    return running_dsn(resolve_target(glob.dsn, load_config(glob.config, must_exist=False), schema=None))


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def lookup(dsn: str, kind: str, prefix: str = "", workflow_id: str | None = None) -> list[str]:
    """Up to LIMIT values of ``kind`` starting with ``prefix``, read from ``dsn``; only those a
    shell can offer as one word (no whitespace, nothing unprintable)."""
    # each kind's statement (sql/queries/completion.sql), spelt out for the SQL catalogue's check
    block = (
        "completion.types"
        if kind == "types"
        else "completion.ids"
        if kind == "ids"
        else "completion.topics"
        if kind == "topics"
        else "completion.schedules"
    )
    params: dict[str, Any] = {"prefix": _like(prefix), "limit": LIMIT, "workflow_id": workflow_id}
    options = f"-c statement_timeout={TIMEOUT_SECONDS * 1000}"
    with psycopg.connect(dsn, connect_timeout=TIMEOUT_SECONDS, autocommit=True, options=options) as conn:
        rows = conn.execute(q(block), params).fetchall()
    return [str(value) for (value,) in rows if value and str(value).isprintable() and " " not in str(value)]


def complete_values(
    kind: Annotated[str, typer.Argument(help="types, ids, topics or schedules.")],
    prefix: Annotated[str, typer.Argument(help="What the word typed so far starts with.")] = "",
    workflow_id: Annotated[
        str | None, typer.Option("--workflow-id", help="For topics: the run whose topic to offer.")
    ] = None,
) -> None:
    """Print completion values from the database, one per line (for the completion scripts)."""
    if kind not in KINDS:
        return
    try:
        dsn = _dsn()
        if dsn is None or (kind == "topics" and not workflow_id):
            return
        found = lookup(dsn, kind, prefix, workflow_id)
    except Exception:  # silent by design: the shell shows nothing rather than an error
        return
    if found:
        render.raw("\n".join(found) + os.linesep)


def register(app: typer.Typer) -> None:
    app.command("complete-values", hidden=True)(complete_values)
