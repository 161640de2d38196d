"""Commands that manage existing workflows: cancel, retry, prune."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import typer

from wfctl import control, keys, validate, words
from wfctl.cli import render
from wfctl.cli.common import ConfigOpt, DsnOpt, IdOrKeyArg, JsonOpt, KeyOpt, Session, workflow_named
from wfctl.durations import parse_duration


def cancel(
    workflow_id: IdOrKeyArg = None,
    key: KeyOpt = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Kept as the error message.")] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Cancel a workflow and its unfinished descendants. The workflow is named by its ID or by
    --key; its child workflows, theirs, and so on are cancelled with it: pending ones at once,
    running ones at their next step boundary."""
    session = Session.create(dsn, config, json)
    given = workflow_named(workflow_id, key)
    validate.check_text(reason, "--reason")
    with session.connect() as conn:
        wid = keys.run_id(conn, given, key)
        done = control.cancel(conn, wid, reason)
    if session.json:
        render.print_json(
            {
                "id": str(wid),
                "previous_status": done.previous_status,
                "worker": done.worker,
                "descendants": list(done.descendants),
            }
        )
        return
    render.notice(cancelled_text(wid, done))


def cancelled_text(wid: UUID, done: control.Cancelled) -> str:
    """What ``wfctl cancel`` says it did, in one line (``wfctl top`` says the same)."""
    if done.previous_status == words.RUNNING:
        return (
            f"cancelled {wid}{_descendants(done)}: its worker {done.worker} stops it at the next "
            "step boundary and commits nothing more for it"
        )
    if any(d.previous_status == words.RUNNING for d in done.descendants):
        return (
            f"cancelled {wid} (it was pending){_descendants(done)}: their workers stop the running "
            "ones at their next step boundary and commit nothing more for them"
        )
    return f"cancelled {wid} (it was pending){_descendants(done)}"


def _descendants(done: control.Cancelled) -> str:
    """`` and 12 unfinished descendants (11 pending, 1 running)``, or nothing."""
    if not done.descendants:
        return ""
    statuses = [d.previous_status for d in done.descendants]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in words.STATUSES if s in statuses)
    noun = "descendant" if len(statuses) == 1 else "descendants"
    return f" and {len(statuses)} unfinished {noun} ({counts})"


def retry(
    workflow_id: IdOrKeyArg = None,
    key: KeyOpt = None,
    from_step: Annotated[
        int | None,
        typer.Option("--from-step", help="Forget the checkpoints of step N and later (default: keep all)."),
    ] = None,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Put a failed or cancelled workflow back to pending. The workflow is named by its ID or
    by --key; its attempt counter is reset, and the descendants a cancel of it took with it go
    back too."""
    session = Session.create(dsn, config, json)
    given = workflow_named(workflow_id, key)
    with session.connect() as conn:
        wid = keys.run_id(conn, given, key)
        done = control.retry(conn, wid, from_step)
    if session.json:
        render.print_json(
            {"id": str(wid), "resumes_after_step": done.kept_steps, "descendants": done.descendants}
        )
    else:
        render.notice(retried_text(wid, done))


def retried_text(wid: UUID, done: control.Retried) -> str:
    """What ``wfctl retry`` says it did, in one line (``wfctl top`` says the same)."""
    noun = "descendant" if done.descendants == 1 else "descendants"
    revived = f", with {done.descendants} {noun} cancelled with it" if done.descendants else ""
    return f"retrying {wid}: pending again, resuming after step {done.kept_steps}{revived}"


def prune(
    older_than: Annotated[str, typer.Option("--older-than", help="Finished longer ago than this (30d).")],
    status: Annotated[
        str, typer.Option("--status", help="Which finished statuses, comma-separated.")
    ] = "completed,failed,cancelled",
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count what would go (runs, steps, worker rows); delete nothing."),
    ] = False,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
) -> None:
    """Delete old finished workflows, their steps and old worker rows. In batches; the worker
    rows are those stopped since before the cutoff; silent when nothing is old."""
    session = Session.create(dsn, config, json)
    age = parse_duration(older_than, what="--older-than", allow_zero=False)
    statuses = words.parse_statuses(status, words.FINISHED)
    with session.connect() as conn:
        if dry_run:
            result = control.prune(conn, age, statuses, dry_run=True)
        else:
            total = control.prune_total(conn, age, statuses) if render.stderr_is_terminal() else 0
            with render.progress("pruning", total=total) as advance:
                result = control.prune(conn, age, statuses, progress=advance)
    if session.json:
        render.print_json(
            {
                "dry_run": dry_run,
                "workflows": result.workflows,
                "steps": result.steps,
                "workers": result.workers,
                # the partitioned layout only: intervals dropped whole, and those left for later
                **(
                    {"partitions": result.partitions, "partitions_busy": result.partitions_busy}
                    if result.partitions is not None
                    else {}
                ),
            }
        )
    elif result.workflows or result.workers:
        verb = "would remove" if dry_run else "removed"
        render.line(
            f"{verb} {result.workflows} workflow(s) and {result.steps} step(s)"
            + (f", and {result.workers} old worker row(s)" if result.workers else "")
            + _partitions_text(result, dry_run)
        )
    if result.partitions_busy:
        render.notice(
            f"{result.partitions_busy} old partition interval(s) could not be locked within "
            "a moment (busy tables): their rows were deleted one by one; the next prune drops "
            "what is left of them whole"
        )


def _partitions_text(result: control.Pruned, dry_run: bool) -> str:
    """`` (3 partition intervals dropped whole)`` in the partitioned layout."""
    if not result.partitions:
        return ""
    verb = "would be dropped" if dry_run else "dropped"
    return f" ({result.partitions} partition interval(s) {verb} whole)"


def register(app: typer.Typer) -> None:
    app.command()(cancel)
    app.command()(retry)
    app.command()(prune)
