"""The worker's readiness check (the worker's part): `--health-port` answers
200 while the worker is connected and its last heartbeat succeeded recently, 503 otherwise (the
database went away, the worker is stopping); `--health-file` is touched at each successful
heartbeat and removed on exit."""

from __future__ import annotations

import http.client
import os
import signal
import socket

import psycopg
import pytest
from helpers import free_port, wait_for
from psycopg import conninfo, sql

from wfctl.errors import InvalidInput
from wfctl.worker.health import HealthFile


def probe(port: int, path: str = "/healthz") -> tuple[int, str] | None:
    """(status, body) of a GET, or None when nothing listens."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return None


def test_health_endpoint_follows_the_database_and_the_workers_life(workers, dsn, pg_server):
    port = free_port()
    proc = workers.start("--health-port", str(port))
    ready = wait_for(lambda: (found := probe(port)) and found[0] == 200 and found, what="200")
    assert ready[1].startswith("ok: last heartbeat ")
    assert probe(port, "/")[0] == 200  # any path: the probe may ask for / or /readyz
    log = proc.log_path  # type: ignore[attr-defined]
    assert f"health=http://127.0.0.1:{port}/healthz" in log.read_text()

    # the database goes away for this worker: no connection allowed, its session cut off
    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = 'wfctl worker'",
                (name,),
            )
            down = wait_for(lambda: (found := probe(port)) and found[0] == 503 and found, what="503")
            assert down[1] == "not connected to the database\n" or down[1].startswith("last successful")
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name)))
    wait_for(lambda: (found := probe(port)) and found[0] == 200, timeout=30, what="200 again")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert probe(port) is None  # the worker is gone: nothing listens


def test_health_file_is_touched_at_each_heartbeat_and_removed_on_exit(workers, tmp_path):
    path = tmp_path / "ready"
    proc = workers.start("--health-file", str(path))
    wait_for(path.exists, what="the health file")
    first = os.stat(path).st_mtime_ns
    wait_for(lambda: path.exists() and os.stat(path).st_mtime_ns > first, what="the next heartbeat's touch")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not path.exists()


def test_health_options_refused_before_anything_starts(workers, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = workers.wfctl("worker", "--app", "testflows", "--health-port", str(port))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"wfctl: error: --health-port {port}: cannot listen on 127.0.0.1:{port} (Address already in use)\n"
    )
    for args, message in [
        (["--health-port", "0"], "--health-port must be between 1 and 65535"),
        (["--health-host", "0.0.0.0"], "--health-host needs --health-port (or [worker] health_port)"),
        (
            ["--health-file", str(tmp_path / "no" / "such" / "ready")],
            f"--health-file {tmp_path / 'no' / 'such' / 'ready'}: the directory {tmp_path / 'no' / 'such'} "
            "does not exist",
        ),
        (["--health-file", str(tmp_path)], f"--health-file {tmp_path}: is a directory"),
    ]:
        result = workers.wfctl("worker", "--app", "testflows", *args)
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"wfctl: error: {message}\n")
    with psycopg.connect(workers.dsn) as conn:  # none of them got as far as registering
        assert conn.execute("SELECT count(*) FROM workers").fetchone() == (0,)


# -- the health file follows no link and removes only the file the worker made ----------------


def test_health_file_touch_follows_no_symbolic_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("")
    os.utime(victim, (0, 0))
    link = tmp_path / "ready"
    link.symlink_to(victim)
    with pytest.raises(InvalidInput, match="it is a symbolic link"):
        HealthFile(str(link))
    health = HealthFile(str(tmp_path / "ready-later"))
    (tmp_path / "ready-later").symlink_to(victim)  # planted after the worker started
    assert health.touch() == f"left --health-file {tmp_path / 'ready-later'} alone: it is a symbolic link"
    assert victim.stat().st_mtime == 0
    health.remove()
    assert (tmp_path / "ready-later").is_symlink() and victim.exists()


def test_health_file_removal_leaves_a_file_swapped_in_meanwhile(tmp_path):
    path = tmp_path / "ready"
    health = HealthFile(str(path))
    assert health.touch() is None and path.stat().st_size == 0
    path.rename(tmp_path / "moved")  # kept, so its inode is not reused by the next file
    path.write_text("")  # another file by the same name, not the one the worker touched
    health.remove()
    assert path.exists() and (tmp_path / "moved").exists()
    path.unlink()
    assert health.touch() is None  # the worker's own again: touched, and then removed
    health.remove()
    assert not path.exists()


def test_health_file_removal_follows_no_symbolic_link(tmp_path):
    path = tmp_path / "ready"
    victim = tmp_path / "victim"
    victim.write_text("")
    health = HealthFile(str(path))
    assert health.touch() is None
    path.rename(tmp_path / "moved")
    path.symlink_to(victim)
    health.remove()
    assert path.is_symlink() and victim.exists()


def test_a_file_that_is_not_the_workers_is_refused_at_start_and_kept(workers, tmp_path):
    """A health file named in a config file was removed on exit whatever it was."""
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    config = tmp_path / "worker.toml"
    config.write_text(f'[worker]\nhealth_file = "{victim}"\n')
    result = workers.wfctl("worker", "--app", "testflows", "--burst", "--config", str(config))
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == (
        f"wfctl: error: --health-file {victim}: it is not empty: the worker touches and removes "
        "only an empty file of its own (remove it, or choose another path)\n"
    )
    assert victim.read_text() == "keep me"
