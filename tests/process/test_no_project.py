"""Where there is no project, only the commands that make one create a database.

`init`, `demo`, `worker` and `db start` may create (initdb) and start the embedded server;
every other command that needs a database says in one line that there is no project here and
how to make one (exit 3), or, where a config names an embedded server that was never created,
that `wfctl init` creates it (exit 5), and creates and starts nothing. An embedded server that
exists but is stopped is started by any command, as before. The list of commands is the Typer
app's: a new command fails `test_every_command_is_classified` until it is placed here.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from wfctl.cli.app import app
from wfctl.embedded import EmbeddedServer

ID = "01890000-0000-7000-8000-000000000000"

#: Commands that need the database and may not create it, with arguments that get them that far.
REFUSING: dict[tuple[str, ...], tuple[str, ...]] = {
    ("submit",): ("three", "{}"),
    ("recover",): (),
    ("cancel",): (ID,),
    ("retry",): (ID,),
    ("prune",): ("--older-than", "30d"),
    ("send",): (ID, "topic", "{}"),
    ("event",): (ID, "key"),
    ("wait",): (ID, "--timeout", "1s"),
    ("limit",): ("three", "--concurrency", "1"),
    ("limits",): (),
    ("schedules",): (),
    ("tick",): (),
    ("stats",): (),
    ("list",): (),
    ("show",): (ID,),
    ("workers",): (),
    ("metrics",): (),
    ("top",): (),
    ("schedule", "add"): ("nightly", "three", "0 3 * * *"),
    ("schedule", "pause"): ("nightly",),
    ("schedule", "resume"): ("nightly",),
    ("schedule", "trigger"): ("nightly",),
    ("schedule", "delete"): ("nightly",),
    ("db", "partition"): (),
    ("db", "url"): (),
}
#: Commands that may create the embedded server.
MAY_CREATE = {("init",), ("demo",), ("worker",), ("db", "start")}
#: Commands that report on the embedded server without starting it, or need no database.
NO_DATABASE = {("db", "status"), ("db", "stop"), ("completion",), ("complete-values",)}


def app_commands() -> set[tuple[str, ...]]:
    import typer

    def walk(command, prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            return {prefix}
        found: set[tuple[str, ...]] = set()
        for name, sub in subcommands.items():
            found |= walk(sub, (*prefix, name))
        return found

    return walk(typer.main.get_command(app), ())


def test_every_command_is_classified():
    assert app_commands() == set(REFUSING) | MAY_CREATE | NO_DATABASE


@pytest.mark.parametrize("command", sorted(REFUSING), ids=" ".join)
def test_no_project_here_creates_nothing(cli, clean_env, command):
    result = cli(*command, *REFUSING[command])
    assert (result.exit_code, result.stdout) == (3, ""), result.output
    assert result.stderr == (
        f"wfctl: error: no wfctl project here: no wfctl.toml in {clean_env} or its parent "
        "directories, and no database configured (`wfctl init` makes one here; or name a database "
        "with --dsn, WFCTL_DSN or --config)\n"
    )
    assert list(clean_env.iterdir()) == []


@pytest.mark.parametrize("command", [("db", "status"), ("db", "stop")], ids=" ".join)
def test_reports_on_no_project_create_nothing(cli, clean_env, command):
    result = cli(*command)
    assert result.exit_code == 0, result.output
    assert list(clean_env.iterdir()) == []


@pytest.mark.parametrize("command", [("list",), ("submit",), ("db", "url")], ids=" ".join)
def test_a_configured_embedded_server_never_created_is_not_created(cli, clean_env, command):
    (clean_env / "wfctl.toml").write_text("[database]\nembedded = true\n")
    result = cli(*command, *REFUSING[command])
    assert (result.exit_code, result.stdout) == (5, ""), result.output
    assert result.stderr == (
        "wfctl: error: the embedded PostgreSQL of this project has not been created yet (no cluster "
        f"in {clean_env / '.wfctl' / 'pgdata'}) (`wfctl init` creates it and installs the schema)\n"
    )
    assert sorted(p.name for p in clean_env.iterdir()) == ["wfctl.toml"]


def test_an_existing_stopped_server_is_started_by_any_command(run_wfctl):
    # not under pytest's basetemp: a pytest session starting meanwhile resets it to 0700, and
    # the server's own user (as root) would lose its way in
    project = Path(tempfile.mkdtemp(prefix="wfnp-"))
    (project / "wfctl.toml").write_text("[database]\nembedded = true\n")
    server = EmbeddedServer(project / ".wfctl")
    try:
        started = run_wfctl("db", "start", cwd=project)
        assert started.exit_code == 0, started.output
        assert run_wfctl("db", "stop", cwd=project).exit_code == 0
        assert not server.is_running()
        listed = run_wfctl("list", cwd=project)
        assert listed.exit_code == 5 and "no wfctl schema" in listed.stderr, listed.output
        assert "started the embedded PostgreSQL" in listed.stderr
        assert server.is_running()
    finally:
        server.stop()
        shutil.rmtree(project, ignore_errors=True)
