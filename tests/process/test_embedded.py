"""The embedded default: with nothing configured, wfctl runs a real PostgreSQL of its own."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from wfctl import embedded_fs, embedded_proc, schema
from wfctl.embedded import SERVER_USER, EmbeddedServer


@pytest.fixture
def project(clean_env):
    yield clean_env
    EmbeddedServer(clean_env / ".wfctl").stop()


def test_embedded_life_cycle(run_wfctl, project):
    init = run_wfctl("init")
    assert init.exit_code == 0, init.output
    assert "started the embedded PostgreSQL" in init.stderr
    assert str(project / ".wfctl" / "pgdata") in init.stderr
    assert f"installed schema version {schema.latest_version()}" in init.stderr
    assert "embedded = true" in (project / "wfctl.toml").read_text()

    # a second process sees the same server and data, and says nothing about starting it
    status = run_wfctl("db", "status", "--json")
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert data["embedded"] and data["running"] and data["schema_version"] == schema.latest_version()
    assert data["server_version"].startswith("18")
    assert "started" not in status.stderr

    url = run_wfctl("db", "url").stdout.strip()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM wfctl_schema_migrations WHERE version > 0").fetchone()[
            0
        ] == len(schema.migrations())

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


as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root's embedded server changes the system")


def root_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("wfctl: running as root:")]


@as_root
def test_as_root_each_change_is_said_once(run_wfctl):
    """A project under a private (0700) directory: the server's user cannot reach it until wfctl
    adds the 'others may traverse' bit, which it says, once, naming the directory and both
    modes; `wfctl db status` names the user the server runs as."""
    outer = Path(tempfile.mkdtemp(prefix="wfctl-root-"))  # mkdtemp makes it 0700
    project = outer / "project"
    project.mkdir()
    server = EmbeddedServer(project / ".wfctl")
    try:
        init = run_wfctl("init", cwd=project)
        assert init.exit_code == 0, init.output
        assert stat.S_IMODE(outer.stat().st_mode) == 0o701
        told = [line for line in root_lines(init.stderr) if f" {outer} " in line]
        assert told == [
            f"wfctl: running as root: added the 'others may traverse' bit to {outer} (mode 0700 -> 0701)"
            f" so that the user '{SERVER_USER}' can reach {server.pgdata}"
        ], init.stderr
        lines = init.stderr.splitlines()
        assert lines.index(told[0]) < next(i for i, t in enumerate(lines) if "started the embedded" in t)

        status = run_wfctl("db", "status", "--json", cwd=project)
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["server_user"] == SERVER_USER
        assert status.stderr == ""
        table = run_wfctl("db", "status", cwd=project)
        assert any(line.split() == ["server", "user", SERVER_USER] for line in table.stdout.splitlines())

        # a restart goes through the same preparation: nothing left to change, nothing said
        assert run_wfctl("db", "stop", cwd=project).exit_code == 0
        again = run_wfctl("db", "start", cwd=project)
        assert again.exit_code == 0 and "started" in again.stderr, again.output
        assert root_lines(again.stderr) == []
    finally:
        server.stop()
        shutil.rmtree(outer, ignore_errors=True)


def test_traversal_bits_are_said_once_per_directory(tmp_path):
    private = tmp_path / "private"
    target = private / "a" / "b"
    target.mkdir(parents=True)
    private.chmod(0o700)
    (private / "a").chmod(0o750)
    said: list[str] = []
    embedded_fs.allow_traversal(target, "someone", said.append)
    assert [line for line in said if str(private) in line.split(" (mode")[0]] == [
        f"added the 'others may traverse' bit to {private} (mode 0700 -> 0701)"
        f" so that the user 'someone' can reach {target}",
        f"added the 'others may traverse' bit to {private / 'a'} (mode 0750 -> 0751)"
        f" so that the user 'someone' can reach {target}",
    ]
    again: list[str] = []
    embedded_fs.allow_traversal(target, "someone", again.append)
    assert again == []


def test_making_the_install_readable_is_said_once(tmp_path):
    root = tmp_path / "pginstall"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "postgres").write_text("")
    (root / "bin" / "postgres").chmod(0o700)
    (root / "share.txt").write_text("")
    (root / "share.txt").chmod(0o600)
    (root / "bin").chmod(0o700)
    said: list[str] = []
    embedded_fs.make_readable(root, "someone", said.append)
    assert said == [
        f"made the files under {root} readable by all users (3 changed)"
        " so that the user 'someone' can run PostgreSQL"
    ]
    assert stat.S_IMODE((root / "bin" / "postgres").stat().st_mode) == 0o705
    assert stat.S_IMODE((root / "share.txt").stat().st_mode) == 0o604
    again: list[str] = []
    embedded_fs.make_readable(root, "someone", again.append)
    assert again == []


@as_root
@pytest.mark.skipif(shutil.which("useradd") is None or shutil.which("userdel") is None, reason="no useradd")
def test_creating_the_server_user_is_said(tmp_path):
    name = f"wfctlt{uuid.uuid4().hex[:8]}"
    said: list[str] = []
    try:
        entry = embedded_proc.ensure_user(name, said.append)
        assert said == [
            f"created the system user '{name}' (uid {entry.pw_uid}) for the embedded PostgreSQL"
            " to run as (PostgreSQL refuses to run as root)"
        ]
        again: list[str] = []
        assert embedded_proc.ensure_user(name, again.append).pw_uid == entry.pw_uid and again == []
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
