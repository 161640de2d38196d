"""What tests/db/test_liveness.py and tests/process/test_liveness_workers.py share."""

from __future__ import annotations

import json

from report_rows import runner


def states(dsn: str, *args: str) -> dict[str, str]:
    result = runner()("workers", "--dsn", dsn, "--json", *args)
    assert result.exit_code == 0, result.output
    return {w["id"]: w["state"] for w in json.loads(result.stdout)}


def metric_workers(dsn: str) -> dict[str, float]:
    result = runner()("metrics", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    found = {}
    for line in result.stdout.splitlines():
        if line.startswith("wfctl_workers{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('"')[1]] = float(value)
    return found
