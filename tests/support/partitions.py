"""What tests/db/test_partitions.py and tests/process/test_partitions_workers.py share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import rows

OLD = "now() - interval '40 days'"


@pytest.fixture
def pdsn(cli, empty_dsn: str) -> Iterator[str]:
    """A new database installed with `wfctl init --partitioned` (one partition per day)."""
    result = cli("init", "--partitioned", "--dsn", empty_dsn)
    assert result.exit_code == 0, result.output
    assert "layout: partitioned, one partition per 1d" in result.stderr
    yield empty_dsn


def partition_names(dsn: str) -> set[str]:
    return {name for (name,) in rows(dsn, "SELECT partition FROM wfctl_partitions()")}
