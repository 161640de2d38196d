"""Which wfctl.toml found by searching wfctl trusts, and where the search stops.

A file found in the current directory or a parent is used only when it belongs to the user
wfctl runs as (or root), no other user may write to it, its directory belongs to that user (or
root), and neither that directory nor one above it is writable by every user without the sticky
bit; anything else is refused in one line naming the file and how to use it anyway (--config,
WFCTL_CONFIG). The search looks in a directory every user may write to but not above it, and
not above WFCTL_CONFIG_CEILING (which the suite sets to each test's own directory). A file
found in a parent directory is named once on stderr; `db status` says which file, and why,
even when it refuses it or cannot reach the database.
"""

from __future__ import annotations

import json
import os

import pytest
from helpers import CEILING, free_port
from support.config_trust import as_root, nobody, refusal, shared_dir

from wfctl.config import load_config, search_dirs
from wfctl.connection import mask_dsn
from wfctl.errors import ConfigError


@as_root
@pytest.mark.parametrize(
    "case", ["file-of-another-user", "directory-of-another-user", "link-of-another-user"]
)
def test_every_owner_on_the_way_must_be_you_or_root(cli, clean_env, monkeypatch, case):
    config = clean_env / "wfctl.toml"
    if case == "link-of-another-user":
        real = clean_env / "real.toml"
        real.write_text("[database]\ndsn = 'host=h'\n")
        config.symlink_to(real)
        os.chown(config, *nobody(), follow_symlinks=False)
        reason = "the symbolic link belongs to 'nobody', not to root"
    else:
        config.write_text("[database]\ndsn = 'host=h'\n")
        target = config if case == "file-of-another-user" else clean_env
        os.chown(target, *nobody())
        reason = (
            "it belongs to 'nobody', not to root"
            if case == "file-of-another-user"
            else f"its directory {clean_env} belongs to 'nobody', not to root"
        )
    sub = clean_env / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    with pytest.raises(ConfigError) as caught:
        load_config()
    assert caught.value.message == f"refusing {config}, found by searching: {reason}"
    result = cli("list")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "", refusal(config, reason))


@pytest.mark.parametrize("where", ["in-it", "above-it"])
def test_a_directory_anyone_may_write_to_without_the_sticky_bit_is_refused(
    cli, clean_env, monkeypatch, where
):
    """Anyone may rename what is in such a directory, and so swap the file (or the whole path
    to it); your own file there is refused too."""
    open_dir = shared_dir(clean_env, 0o777)
    home = open_dir if where == "in-it" else open_dir / "project"
    home.mkdir(exist_ok=True)
    config = home / "wfctl.toml"
    config.write_text("[database]\ndsn = 'host=h'\n")
    monkeypatch.chdir(home)
    placed = "its directory" if where == "in-it" else "a directory above it"
    reason = f"every user may write to {open_dir} ({placed}, mode 0777, no sticky bit) and so replace it"
    result = cli("list")
    assert (result.exit_code, result.stderr) == (3, refusal(config, reason))


def test_your_own_file_in_a_sticky_shared_directory_is_used(cli, clean_env, dsn, monkeypatch):
    shared = shared_dir(clean_env)
    (shared / "wfctl.toml").write_text(f"[database]\ndsn = {json.dumps(dsn)}\n")
    monkeypatch.chdir(shared)
    result = cli("list", "--json")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "[]\n", "")


def test_a_file_others_may_write_to_is_refused_unless_named(cli, clean_env, dsn):
    config = clean_env / "wfctl.toml"
    config.write_text(f"[database]\ndsn = {json.dumps(dsn)}\n")
    config.chmod(0o646)
    result = cli("list")
    assert (result.exit_code, result.stderr) == (3, refusal(config, "every user may write to it (mode 0646)"))
    named = cli("list", "--json", "--config", str(config))
    assert (named.exit_code, named.stdout) == (0, "[]\n"), named.output
    assert json.loads(named.stderr) == {  # --json: the warning is a JSON object too
        "warning": f"{config} may be changed by every user (mode 0646): run `chmod go-w {config}`"
    }


def test_the_search_looks_in_a_shared_directory_but_not_above_it(clean_env, monkeypatch):
    (clean_env / "wfctl.toml").write_text("[database]\ndsn = 'host=above'\n")
    shared = shared_dir(clean_env)
    project = shared / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    assert search_dirs(project) == [project, shared]
    found = load_config()
    assert (found.exists, found.path) == (False, project / "wfctl.toml")


def test_the_ceiling_stops_the_search(clean_env, tmp_path, monkeypatch):
    """WFCTL_CONFIG_CEILING (set by the suite to the test's directory): that directory is
    searched, nothing above it; several are separated by os.pathsep, relative ones ignored."""
    deep = clean_env / "a" / "b"
    deep.mkdir(parents=True)
    assert search_dirs(deep) == [deep, clean_env / "a", clean_env, tmp_path]
    monkeypatch.setenv(CEILING, os.pathsep.join(["relative/dir", str(clean_env / "a"), "/nonexistent"]))
    assert search_dirs(deep) == [deep, clean_env / "a"]


def test_db_status_says_which_config_even_when_refused_or_unreachable(cli, clean_env, monkeypatch):
    """On stderr, before the error (an error prints nothing on stdout)."""
    config = clean_env / "wfctl.toml"
    dsn = f"host=127.0.0.1 port={free_port()} dbname=x user=u"
    config.write_text(f"[database]\ndsn = '{dsn}'\n")
    unreachable = cli("db", "status", "--json")
    assert (unreachable.exit_code, unreachable.stdout) == (4, ""), unreachable.output
    said, error = (json.loads(line) for line in unreachable.stderr.splitlines())  # --json: JSON lines
    assert said == {"notice": f"config: {config} (found in the current directory); database: {mask_dsn(dsn)}"}
    assert error["error"].startswith("cannot connect to ") and error["exit_code"] == 4

    config.chmod(0o666)
    sub = clean_env / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    refused = cli("db", "status", "--json")
    assert (refused.exit_code, refused.stdout) == (3, ""), refused.output
    said, error = (json.loads(line) for line in refused.stderr.splitlines())
    assert said == {
        "notice": f"config: {config} (found in a parent directory of {sub}; refused: every user may "
        "write to it (mode 0666))"
    }
    expected = refusal(config, "every user may write to it (mode 0666)")
    assert error == {"error": expected.removeprefix("wfctl: error: ").rstrip("\n"), "exit_code": 3}
