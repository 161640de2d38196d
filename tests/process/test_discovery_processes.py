"""Finding the project from any directory: the nearest wfctl.toml in the current directory or its
parents, not above $HOME and not across a filesystem boundary; --config and WFCTL_CONFIG win; with
nothing found the embedded database goes in the current directory (said once on stderr), never
inside a Python package; `db status` says which config and data directory are in use, and why.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_discovery.py.
"""

from __future__ import annotations

import json


def root_notice(line: str) -> bool:
    return line.startswith(("wfctl: running as root:", "wfctl: started the embedded PostgreSQL"))


def test_nothing_found_is_said_once_and_init_makes_it_the_project(run_wfctl, clean_env, tmp_path):
    """No project here: a command that only reads refuses in one line and creates nothing.
    Once an embedded server exists in the current directory (`db start`), each command says in
    one line on stderr that it uses it, until `wfctl init` writes wfctl.toml; then nothing is
    said, and `db status` names the config and the data directory with their reasons."""
    env = {"HOME": str(tmp_path)}
    said = (
        f"wfctl: no wfctl.toml in {clean_env} or its parent directories: using the embedded PostgreSQL"
        f" in {clean_env / '.wfctl'} (`wfctl init` writes a wfctl.toml here)"
    )
    try:
        status = json.loads(run_wfctl("db", "status", "--json", env=env).stdout)
        assert (status["config"], status["running"]) == (None, False)
        assert status["config_from"] == f"no wfctl.toml in {clean_env} or its parent directories"
        assert status["data_dir_from"] == "the default in the current directory: no wfctl.toml was found"

        refused = run_wfctl("list", env=env)
        assert (refused.exit_code, refused.stdout) == (3, ""), refused.output
        assert refused.stderr == (
            f"wfctl: error: no wfctl project here: no wfctl.toml in {clean_env} or its parent "
            "directories, and no database configured (`wfctl init` makes one here; or name a "
            "database with --dsn, WFCTL_DSN or --config)\n"
        )
        assert list(clean_env.iterdir()) == []

        started = run_wfctl("db", "start", env=env)
        assert started.exit_code == 0, started.output
        first = run_wfctl("list", env=env)
        assert first.exit_code == 5, first.output  # the server made by `db start`: no schema yet
        lines = [line for line in first.stderr.splitlines() if not root_notice(line)]
        assert lines[0] == said and lines.count(said) == 1, first.stderr
        assert len(lines) == 2 and "no wfctl schema" in lines[1], first.stderr

        init = run_wfctl("init", env=env)
        assert init.exit_code == 0, init.output
        assert "no wfctl.toml" not in init.stderr and f"wrote {clean_env / 'wfctl.toml'}" in init.stderr

        again = run_wfctl("list", "--json", env=env)
        assert (again.exit_code, again.stdout, again.stderr) == (0, "[]\n", ""), again.output
        status = json.loads(run_wfctl("db", "status", "--json", env=env).stdout)
        assert status["config"] == str(clean_env / "wfctl.toml")
        assert status["config_from"] == "found in the current directory"
        assert status["data_dir_from"] == f"the default, beside {clean_env / 'wfctl.toml'}"
    finally:
        run_wfctl("db", "stop", env=env)
