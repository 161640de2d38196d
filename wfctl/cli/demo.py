"""`wfctl demo`: a guided run on the configured (by default, embedded) database."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from typing import Annotated

import typer

from wfctl import demo, reports, schema
from wfctl.cli import render, render_reports
from wfctl.cli.common import ConfigOpt, DsnOpt, Session
from wfctl.errors import InvalidInput


def demo_command(
    orders: Annotated[int, typer.Option("--orders", help="How many ordinary orders to submit.")] = 30,
    dsn: DsnOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run a few dozen demo orders through two workers and show what happened. It installs
    the schema first; one order fails and retries, one loses its worker to SIGKILL and is resumed
    by the other worker."""
    if not 1 <= orders <= 1000:
        raise InvalidInput("--orders must be between 1 and 1000")
    session = Session.create(dsn, config)
    session.may_create = True
    dsn_value = session.dsn()
    with session.connect(check_schema=False) as conn:
        result = schema.migrate(conn)
        render.notice("schema installed" if result.applied else "schema is up to date")
        with tempfile.TemporaryFile("w+") as log:
            outcome = demo.run(conn, dsn_value, render.notice, orders=orders, log=log)
            log.seek(0)
            events = [
                line.rstrip() for line in log if " retry " in line or " lost " in line or " failed " in line
            ]
    for line in events:
        render.notice(f"  worker log: {line}")
    render.notice(f"all {len(outcome.ids)} orders finished in {outcome.seconds:.1f}s")
    with session.connect() as conn:
        report = reports.stats(conn, since=timedelta(hours=24), workflow_type=demo.TYPE)
    render.notice("this is what `wfctl stats --since 24h --type demo-order` shows now:")
    render_reports.stats_report(report, "24h", None)
    render.notice(f"look closer: wfctl show {outcome.crashed}   (the order whose worker was killed)")
    render.notice(f"             wfctl show {outcome.flaky}   (the order that failed once and was retried)")
    render.notice(
        f"             wfctl show {outcome.bulk}   (the bulk order: {outcome.checks} child workflows, "
        "then an approval)"
    )


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
