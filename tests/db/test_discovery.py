"""Finding the project from any directory: the nearest wfctl.toml in the
current directory or its parents, not above $HOME and not across a filesystem boundary;
--config and WFCTL_CONFIG win; with nothing found the embedded database goes in the current
directory (said once on stderr), never inside a Python package; `db status` says which config
and data directory are in use, and why.

The suite's fixtures set WFCTL_CONFIG_CEILING to each test's temporary directory, so the search
never leaves it (a stray wfctl.toml in /tmp cannot change what the tests see); some tests here
also set HOME there, to hold the search's stop at $HOME.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import rows

from wfctl.config import (
    FOUND_ABOVE,
    FOUND_HERE,
    FROM_ENV,
    FROM_OPTION,
    NOT_FOUND,
    describe_data_dir_origin,
    load_config,
    resolve_target,
    search_dirs,
)


@pytest.fixture
def home(clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is the test's temporary directory; the project (the cwd) is inside it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write_dsn_config(directory: Path, dsn: str) -> Path:
    path = directory / "wfctl.toml"
    path.write_text(f"[database]\ndsn = {json.dumps(dsn)}\n")
    return path


def test_a_command_in_a_subdirectory_uses_the_project_database(cli, dsn, clean_env, home, monkeypatch):
    config = write_dsn_config(clean_env, dsn)
    deep = clean_env / "src" / "myapp"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)

    submitted = cli("submit", "three", "{}")
    assert submitted.exit_code == 0, submitted.output
    wid = submitted.stdout.strip()
    assert rows(dsn, "SELECT id::text FROM workflows") == [(wid,)]
    listed = cli("list", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stderr) == {"notice": f"using {config} (found in a parent directory)"}
    assert [w["id"] for w in json.loads(listed.stdout)] == [wid]
    assert not (deep / ".wfctl").exists() and not (deep / "wfctl.toml").exists()

    status = json.loads(cli("db", "status", "--json").stdout)
    assert status["config"] == str(config)
    assert status["config_from"] == f"found in a parent directory of {deep}"
    assert status["source"] == str(config) and status["embedded"] is False
    text = cli("db", "status").stdout
    assert any(line.split()[:2] == ["config", str(config)] for line in text.splitlines()), text


def test_nearest_config_wins_and_option_and_env_win_over_discovery(clean_env, home, monkeypatch, tmp_path):
    write_dsn_config(clean_env, "host=project")
    sub = clean_env / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    found = load_config()
    assert (found.origin, found.path) == (FOUND_ABOVE, clean_env / "wfctl.toml")
    assert resolve_target(None, found).dsn == "host=project"

    write_dsn_config(sub, "host=nearer")
    nearer = load_config()
    assert (nearer.origin, resolve_target(None, nearer).dsn) == (FOUND_HERE, "host=nearer")

    other = write_dsn_config(tmp_path, "host=other")  # not named wfctl.toml's directory: any file
    named = load_config(other)
    assert (named.origin, resolve_target(None, named).dsn) == (FROM_OPTION, "host=other")
    monkeypatch.setenv("WFCTL_CONFIG", str(other))
    from_env = load_config()
    assert (from_env.origin, resolve_target(None, from_env).dsn) == (FROM_ENV, "host=other")


def test_the_search_stops_at_home(clean_env, tmp_path, monkeypatch):
    write_dsn_config(tmp_path, "host=above-home")  # another project's, above HOME
    monkeypatch.setenv("HOME", str(clean_env))
    sub = clean_env / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert search_dirs(sub) == [sub, clean_env / "a", clean_env]
    missing = load_config()
    assert (missing.exists, missing.origin) == (False, NOT_FOUND)
    assert missing.path == sub / "wfctl.toml"

    write_dsn_config(clean_env, "host=home")  # HOME itself is searched
    assert resolve_target(None, load_config()).dsn == "host=home"

    # outside HOME the search goes on up: the file above the project is found
    (clean_env / "wfctl.toml").unlink()
    monkeypatch.setenv("HOME", str(clean_env / "elsewhere"))
    assert resolve_target(None, load_config()).dsn == "host=above-home"


@pytest.mark.skipif(not Path("/proc/sys").is_dir(), reason="needs /proc")
def test_the_search_does_not_cross_a_filesystem_boundary(monkeypatch):
    """/proc is its own file system: the search from /proc/sys stops at /proc, as git's does."""
    monkeypatch.setenv("HOME", "/nonexistent-home")
    if Path("/proc").stat().st_dev == Path("/").stat().st_dev:
        pytest.skip("/proc is not a mount point here")
    assert search_dirs(Path("/proc/sys")) == [Path("/proc/sys"), Path("/proc")]


def test_a_dangling_symlink_found_in_a_parent_is_an_error(cli, clean_env, home, monkeypatch):
    (clean_env / "wfctl.toml").symlink_to(clean_env / "gone.toml")
    sub = clean_env / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    result = cli("list")
    assert result.exit_code == 3 and "is a symlink to" in result.stderr, result.output


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("db", "status"),
        ("db", "start"),
        ("db", "url"),
        ("init",),
        ("init", "--dsn", "host=/nonexistent dbname=x"),
    ],
)
def test_no_database_or_config_inside_a_python_package(cli, clean_env, home, monkeypatch, args):
    """Nothing found, and the current directory is a package or inside one: one line, exit 3,
    nothing created (init refuses before it connects anywhere)."""
    package = clean_env / "myapp"
    templates = package / "templates"
    templates.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for where, said in (
        (package, f"{package} is a Python package"),
        (templates, f"{templates} is inside {package}, which is a Python package"),
    ):
        monkeypatch.chdir(where)
        result = cli(*args)
        assert result.exit_code == 3, result.output
        assert result.stderr == (
            f"wfctl: error: no wfctl.toml in {where} or its parent directories, and {said}: wfctl puts"
            " no database or config file there (run `wfctl init` in the project's root directory,"
            " or pass --config)\n"
        )
        assert result.stdout == ""
        assert sorted(p.name for p in where.iterdir()) == sorted(
            ["__init__.py", "templates"] if where == package else []
        )


def test_inside_a_package_a_configured_database_is_fine(cli, dsn, clean_env, home, monkeypatch):
    package = clean_env / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.chdir(package)
    assert cli("list", "--dsn", dsn).exit_code == 0
    # a config file the user names may be written anywhere
    named = package / "local.toml"
    init = cli("init", "--dsn", dsn, "--config", str(named))
    assert init.exit_code == 0 and named.exists(), init.output
    # and the project's config, found above the package, is used from inside it
    config = write_dsn_config(clean_env, dsn)
    listed = cli("list", "--json")
    said = {"notice": f"using {config} (found in a parent directory)"}  # --json: a JSON line
    assert (listed.exit_code, listed.stdout, json.loads(listed.stderr)) == (0, "[]\n", said), listed.output


def test_data_dir_reasons(clean_env, home, monkeypatch):
    (clean_env / "wfctl.toml").write_text('[database]\nembedded = true\ndata_dir = "db"\n')
    config = load_config()
    target = resolve_target(None, config)
    assert describe_data_dir_origin(target, config) == f"[database] data_dir in {clean_env / 'wfctl.toml'}"
    (clean_env / "wfctl.toml").write_text("[database]\nembedded = true\n")
    monkeypatch.setenv("WFCTL_DATA_DIR", str(clean_env / "elsewhere"))
    config = load_config()
    target = resolve_target(None, config)
    assert target.data_dir == clean_env / "elsewhere"
    assert describe_data_dir_origin(target, config) == "WFCTL_DATA_DIR"
