"""The per-statement benchmark (bench/statements.py) still runs: a short drain on a PostgreSQL 15
of its own that preloads pg_stat_statements, its JSON consistent (the statements sum to the
total, the group commit and the claim among them), and a server without the extension refused
in one line."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
import servers
from helpers import run_benchmark


@pytest.fixture(scope="module")
def preloading() -> Iterator[servers.Postgres]:
    servers.require_postgres()
    base = servers.make_base("wfctl-bench-statements-")
    with contextlib.ExitStack() as stack:
        stack.callback(servers.remove, base)
        yield stack.enter_context(
            servers.Postgres.init(
                base, settings={**servers.FAST, "shared_preload_libraries": "pg_stat_statements"}
            )
        )


def test_a_short_drain_accounts_every_statement_per_workflow(preloading):
    done = run_benchmark(
        "bench.statements", ("-n", "300", "--workers", "1", "--json", "--server-dsn", preloading.dsn()), 600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert result["n"] == 300 and 0 < result["commits_per_workflow"] < 5
    names = [s["name"] for s in result["statements"]]
    assert any(n.startswith("Group commit") for n in names) and any(
        n.startswith("Claim up to") for n in names
    )
    for figure in ("calls", "rows", "blks_hit", "wal_bytes"):
        summed = sum(s[figure] for s in result["statements"])
        assert summed == pytest.approx(result["total"][figure]), figure
    assert result["total"]["calls"] > 0 and result["total"]["wal_bytes"] > 0


def test_a_server_without_pg_stat_statements_is_refused_in_one_line(pg_server):
    done = run_benchmark("bench.statements", ("-n", "10", "--server-dsn", pg_server.admin_dsn), 120)
    assert done.returncode == 1
    assert "does not preload pg_stat_statements" in done.stderr
