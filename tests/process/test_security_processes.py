"""Security: no string-formatted SQL in the package, and no password in any message, log line or
--json output; a wfctl.toml holding a password is private, and a readable one is warned about.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_security.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
from helpers import APPS, free_port, wait_for
from psycopg import sql
from support.security import PASSWORD, no_password, write_config


def test_worker_log_never_shows_the_password(cli, pw_dsn, pw_role, pg_server, tmp_path):
    """A worker on a password DSN loses its connection (terminated, then refused for a while
    because the role may not log in), reconnects, works, and stops: the password is in none
    of its log lines."""
    assert cli("init", "--dsn", pw_dsn).exit_code == 0
    log_path = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WFCTL_", "PG"))}
    env.update(WFCTL_DSN=pw_dsn, WFCTL_TEST_LOG=str(tmp_path / "effects.log"))
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wfctl",
                "worker",
                "--app",
                "testflows",
                "--log-format",
                "plain",
                "--heartbeat",
                "200ms",
                "--poll",
                "100ms",
            ],
            cwd=APPS,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    role = sql.Identifier(pw_role)
    try:
        wait_for(lambda: "ready" in log_path.read_text(), what="the worker to start")
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(role))
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (pw_role,)
            )
            wait_for(
                lambda: "lost the database connection" in log_path.read_text(), what="the lost connection"
            )
            admin.execute(sql.SQL("ALTER ROLE {} LOGIN").format(role))
        wait_for(lambda: "reconnected" in log_path.read_text(), what="the reconnect")
        with psycopg.connect(pw_dsn, autocommit=True) as conn:
            wid = conn.execute("SELECT wfctl_submit('three', '{}')").fetchone()[0]
            wait_for(
                lambda: (
                    conn.execute("SELECT status FROM workflows WHERE id = %s", (wid,)).fetchone()[0]
                    == "completed"
                ),
                what="a workflow to run after the reconnect",
            )
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("ALTER ROLE {} LOGIN").format(role))
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    log = log_path.read_text()
    assert code == 0, log
    no_password(log)
    assert "completed" in log


def test_warning_also_for_a_named_config_and_a_failing_command(run_wfctl, clean_env):
    config = clean_env / "elsewhere.toml"
    write_config(config, f"host=127.0.0.1 port={free_port()} user=u password={PASSWORD} dbname=d", 0o644)
    result = run_wfctl("stats", "--config", str(config))
    assert result.exit_code == 4
    no_password(result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and "readable by other users" in lines[0] and lines[1].startswith("wfctl: error:")
