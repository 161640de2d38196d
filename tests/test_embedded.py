"""The embedded default: with nothing configured, wfctl runs a real PostgreSQL of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest

from wfctl.embedded import EmbeddedServer


@pytest.fixture
def project(clean_env):
    yield clean_env
    EmbeddedServer(clean_env / ".wfctl").stop()


def test_embedded_life_cycle(run_wfctl, project):
    init = run_wfctl("init")
    assert init.exit_code == 0, init.output
    assert "started the embedded PostgreSQL" in init.stderr
    assert str(project / ".wfctl" / "pgdata") in init.stderr
    assert "installed schema version 1" in init.stderr
    assert "embedded = true" in (project / "wfctl.toml").read_text()

    # a second process sees the same server and data, and says nothing about starting it
    status = run_wfctl("db", "status", "--json")
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert data["embedded"] and data["running"] and data["schema_version"] == 1
    assert data["server_version"].startswith("18")
    assert "started" not in status.stderr

    url = run_wfctl("db", "url").stdout.strip()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations").fetchone()[0] == 1

    stop = run_wfctl("db", "stop")
    assert stop.exit_code == 0 and "stopped" in stop.stderr
    assert json.loads(run_wfctl("db", "status", "--json").stdout)["running"] is False
    assert "not running" in run_wfctl("db", "stop").stderr

    # the next command starts it again, with the data kept
    again = run_wfctl("init")
    assert again.exit_code == 0 and "started" in again.stderr and "up to date" in again.stderr


def test_two_processes_starting_it_at_once(project):
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "wfctl", "init"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("started the embedded" in err for _o, err in outputs) == 1, outputs
