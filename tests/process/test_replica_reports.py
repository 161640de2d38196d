"""Reports from a streaming standby: `stats`, `list`, `show`, `workers` and `metrics` with
`--replica DSN` (or `[reports] dsn` in wfctl.toml) read the standby, say how current its data
is, and warn when replay is paused or the standby does not stream.

One primary with an asynchronous streaming standby (pg_basebackup -R) for the whole module."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
import servers
from helpers import rows, wait_for

import wfctl
from wfctl import schema

DBNAME = "wfctl_replica"
# under pytest-xdist (--dist loadgroup) the module runs on one worker: one set of servers, not one per worker
pytestmark = pytest.mark.xdist_group("replica")


def settled(value: object) -> object:
    """A report without what depends on the moment it was read (ages, "as of")."""
    if isinstance(value, dict):
        return {
            k: settled(v)
            for k, v in value.items()
            if k != "as_of" and "age" not in k and not k.endswith("_in")
        }
    if isinstance(value, list):
        return [settled(v) for v in value]
    return value


@dataclass
class Pair:
    primary: servers.Postgres
    standby: servers.Postgres

    def primary_dsn(self) -> str:
        return self.primary.dsn(DBNAME)

    def standby_dsn(self) -> str:
        return self.standby.dsn(DBNAME)

    def caught_up(self) -> None:
        """Wait until the standby replayed everything the primary wrote so far."""
        with self.primary.connect() as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]

        def replayed() -> bool:
            with self.standby.connect() as conn:
                row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
            return bool(row and row[0])

        wait_for(replayed, what="the standby to replay the primary's writes")


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    servers.require_postgres()
    base = servers.make_base("wfctl-replica-")
    with contextlib.ExitStack() as stack:
        stack.callback(servers.remove, base)
        primary = stack.enter_context(servers.Postgres.init(base, "primary", primary=True))
        standby = stack.enter_context(servers.Postgres.standby_of(primary, "standby"))
        primary.create_database(DBNAME)
        with psycopg.connect(primary.dsn(DBNAME), autocommit=True) as conn:
            schema.migrate(conn)
        yield Pair(primary, standby)


@pytest.fixture
def reports_env(pair: Pair, workers) -> Pair:
    """Workers and commands of this test talk to the primary (WFCTL_DSN)."""
    workers.dsn = pair.primary_dsn()
    return pair


def test_every_report_reads_the_standby_and_says_how_current_it_is(reports_env: Pair, workers) -> None:
    pair = reports_env
    wid = wfctl.submit(pair.primary_dsn(), "three", {"n": 1}, key="replica-three")
    workers.run()  # a --burst worker on the primary runs it
    pair.caught_up()
    replica = pair.standby_dsn()
    for command in (["stats"], ["list"], ["show", str(wid)], ["workers"]):
        on_primary = workers.wfctl(*command, "--json")
        on_standby = workers.wfctl(*command, "--json", "--replica", replica)
        assert on_primary.exit_code == 0, on_primary.output
        assert on_standby.exit_code == 0, on_standby.output
        assert settled(json.loads(on_standby.stdout)) == settled(json.loads(on_primary.stdout)), command
        assert on_standby.stderr == ""  # --json: quiet while replay is healthy
        table = workers.wfctl(*command, "--replica", replica)
        assert table.exit_code == 0, table.output
        assert "read from the standby 127.0.0.1:" in table.stderr
        assert "its data is as of" in table.stderr
    metrics = workers.wfctl("metrics", "--replica", replica)
    assert metrics.exit_code == 0, metrics.output
    assert metrics.stderr == ""
    assert "wfctl_replica_replayed_age_seconds " in metrics.stdout
    assert rows(pair.primary_dsn(), "SELECT status FROM workflows WHERE id = %s", wid) == [("completed",)]
    assert 'wfctl_workflows{workflow_type="three",status="completed"} 1\n' in metrics.stdout, metrics.stdout


def test_paused_replay_shows_older_data_and_says_so(reports_env: Pair, workers) -> None:
    pair = reports_env
    pair.caught_up()
    with pair.standby.connect() as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        wid = wfctl.submit(pair.primary_dsn(), "three", {"n": 2})
        listed = workers.wfctl("list", "--json", "--replica", pair.standby_dsn())
        assert listed.exit_code == 0, listed.output
        assert str(wid) not in listed.stdout  # the standby has not replayed it
        assert "replay is PAUSED" in listed.stderr  # a warning even with --json
        shown = workers.wfctl("show", str(wid), "--replica", pair.standby_dsn())
        assert shown.exit_code != 0 and f"no workflow with id {wid}" in shown.stderr
    finally:
        with pair.standby.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
    pair.caught_up()
    listed = workers.wfctl("list", "--json", "--replica", pair.standby_dsn())
    assert str(wid) in listed.stdout


def test_reports_dsn_in_the_config_file(reports_env: Pair, workers, tmp_path) -> None:
    pair = reports_env
    config = tmp_path / "wfctl.toml"
    config.write_text(
        f'[database]\ndsn = "{pair.primary_dsn()}"\n\n[reports]\ndsn = "{pair.standby_dsn()}"\n'
    )
    env = {"WFCTL_DSN": "", "WFCTL_CONFIG": str(config)}
    env.pop("WFCTL_DSN")
    result = workers.wfctl("stats", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert "read from the standby" in result.stderr
    # the primary itself named as the replica: said plainly
    direct = workers.wfctl("stats", "--replica", pair.primary_dsn())
    assert "which is not a standby" in direct.stderr


def test_bad_replica_input_is_one_line(reports_env: Pair, workers, tmp_path) -> None:
    empty = workers.wfctl("stats", "--replica", "")
    assert empty.exit_code == 2 and empty.stderr.startswith("wfctl: error: --replica is empty")
    assert empty.stderr.count("\n") == 1
    gone = workers.wfctl("list", "--replica", "host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    assert gone.exit_code != 0 and gone.stderr.count("\n") == 1, gone.output
    assert "Traceback" not in gone.stderr
    assert rows(reports_env.primary_dsn(), "SELECT 1") == [(1,)]
