"""The workers keep the rollups the reports read up to date (wfctl/worker/rollups.py): a
worker started on a database with history rolls its closed hours up in a thread of its own, and
stats reads them."""

from __future__ import annotations

from datetime import timedelta

import psycopg
from helpers import rows, wait_for
from report_rows import db_now, step, workflow

from wfctl import reports


def test_a_worker_rolls_up_the_closed_hours_and_stats_reads_them(workers, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        now = db_now(conn)
        for hours in range(3, 53):  # 50 runs over more than two days: one whole day (UTC) at least
            wid = workflow(conn, now, age=timedelta(hours=hours), run=timedelta(seconds=2))
            step(conn, wid, 1, "charge", start=now - timedelta(hours=hours) + timedelta(seconds=1), seconds=2)
    worker = workers.start()
    wait_for(
        lambda: rows(dsn, "SELECT count(*) FROM wfctl_rollup_buckets WHERE span = 'd'")[0][0] > 0,
        timeout=60,
        what="a day rolled up by the worker",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        used = rows(dsn, "SELECT count(*) FROM wfctl_rollup_window(now() - interval '60 hours')")[0][0]
        assert used > 0
        report = reports.stats(conn, since=timedelta(hours=60))
    (order,) = report.success_rate
    assert (order["total"], order["completed"]) == (50, 50)
    (charge,) = report.slow_steps
    assert (charge["count"], charge["avg_seconds"]) == (50, 2)
    assert "rolling up" not in worker.log_path.read_text()
