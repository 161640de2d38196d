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
import pwd
from pathlib import Path

import pytest
from helpers import CEILING, free_port, rows

from wfctl.config import load_config, search_dirs
from wfctl.connection import mask_dsn
from wfctl.embedded import EmbeddedServer
from wfctl.errors import ConfigError

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user")


def nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def shared_dir(parent: Path, mode: int = 0o1777) -> Path:
    """A directory every user may write to (sticky by default, as /tmp)."""
    shared = parent / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return shared


def planted(directory: Path, body: str) -> Path:
    """A wfctl.toml that the user nobody put in ``directory``."""
    path = directory / "wfctl.toml"
    path.write_text(body)
    os.chown(path, *nobody())
    return path


def refusal(path: Path, reason: str) -> str:
    return (
        f"wfctl: error: refusing {path}, found by searching: {reason} (to use it anyway, name it: "
        f"--config {path} or WFCTL_CONFIG={path})\n"
    )


@as_root
def test_a_strangers_config_in_a_shared_parent_is_refused(run_wfctl, tmp_path, dsn):
    """nobody's wfctl.toml in a mode-1777 parent pointed root's commands at nobody's database
    (what root submitted landed there; `list` sent root's password file to it)."""
    shared = shared_dir(tmp_path)
    config = planted(shared, f"[database]\ndsn = {json.dumps(dsn)}\n")
    project = shared / "project"
    project.mkdir()
    said = refusal(config, "it belongs to 'nobody', not to root")
    for args in (("submit", "three", "{}"), ("list",), ("db", "url")):
        result = run_wfctl(*args, cwd=project)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "", said), args
    assert rows(dsn, "SELECT count(*) FROM workflows") == [(0,)]
    # named, it is the user's choice
    named = run_wfctl("submit", "three", "{}", "--config", str(config), cwd=project)
    assert named.exit_code == 0, named.output
    assert rows(dsn, "SELECT count(*) FROM workflows") == [(1,)]


@as_root
def test_a_strangers_worker_settings_are_refused_before_anything_runs(run_wfctl, tmp_path):
    """From nobody's file: root imported nobody's module (`[worker] app`), and removed any file
    it named as `[worker] health_file` on exit."""
    shared = shared_dir(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    marker = tmp_path / "imported"
    (shared / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = planted(shared, f'[worker]\napp = "evilmod"\nhealth_file = {json.dumps(str(victim))}\n')
    result = run_wfctl("worker", "--burst", "--dsn", "host=/nonexistent dbname=x", cwd=shared)
    assert (result.exit_code, result.stderr) == (3, refusal(config, "it belongs to 'nobody', not to root"))
    assert not marker.exists()
    assert victim.read_text() == "keep me"


@as_root
def test_a_strangers_embedded_data_dir_is_refused(run_wfctl, tmp_path):
    """`embedded = true, data_dir = ...` from nobody's file had root build a cluster there and
    add o+x to a 0700 directory on the way."""
    shared = shared_dir(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    data_dir = private / "db"
    config = planted(shared, f"[database]\nembedded = true\ndata_dir = {json.dumps(str(data_dir))}\n")
    try:
        result = run_wfctl("db", "start", cwd=shared)
        said = refusal(config, "it belongs to 'nobody', not to root")
        assert (result.exit_code, result.stderr) == (3, said)
        assert not data_dir.exists()
        assert private.stat().st_mode & 0o7777 == 0o700
    finally:
        EmbeddedServer(data_dir).stop()


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
    assert named.stderr == (
        f"wfctl: warning: {config} may be changed by every user (mode 0646): run `chmod go-w {config}`\n"
    )


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


def test_a_stray_config_above_the_test_directory_changes_nothing(run_wfctl, cli, clean_env, tmp_path):
    """A wfctl.toml above the test's directory (as a stray /tmp/wfctl.toml would be) is not
    found: the tests' ceiling keeps the search inside each test's own directory."""
    stray = tmp_path.parent / "wfctl.toml"
    stray.write_text("[database]\ndsn = 'host=/nonexistent-stray dbname=stray'\n")
    try:
        status = run_wfctl("db", "status", "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.stdout)["config"] is None
        listed = cli("list")
        assert listed.exit_code == 3 and "no wfctl project here" in listed.stderr, listed.output
        assert "nonexistent-stray" not in listed.output
    finally:
        stray.unlink()


def test_a_config_found_above_is_named_once_and_not_under_quiet(run_wfctl, clean_env, dsn):
    config = clean_env / "wfctl.toml"
    config.write_text(f'[database]\ndsn = {json.dumps(dsn)}\n[worker]\napp = "testflows"\n')
    sub = clean_env / "sub"
    sub.mkdir()
    said = f"wfctl: using {config} (found in a parent directory)\n"
    submitted = run_wfctl("submit", "three", "{}", cwd=sub)
    assert (submitted.exit_code, submitted.stderr) == (0, said), submitted.output
    here = run_wfctl("list", "--json")
    assert (here.exit_code, here.stderr) == (0, ""), here.output
    named = run_wfctl("list", "--json", "--config", str(config), cwd=sub)
    assert (named.exit_code, named.stderr) == (0, ""), named.output
    ticked = run_wfctl("tick", "--quiet", cwd=sub)
    assert (ticked.exit_code, ticked.stdout, ticked.stderr) == (0, "", ""), ticked.output


def test_db_status_says_which_config_even_when_refused_or_unreachable(cli, clean_env, monkeypatch):
    """On stderr, before the error (an error prints nothing on stdout)."""
    config = clean_env / "wfctl.toml"
    dsn = f"host=127.0.0.1 port={free_port()} dbname=x user=u"
    config.write_text(f"[database]\ndsn = '{dsn}'\n")
    unreachable = cli("db", "status", "--json")
    assert (unreachable.exit_code, unreachable.stdout) == (4, ""), unreachable.output
    said, error = unreachable.stderr.splitlines()
    assert said == f"wfctl: config: {config} (found in the current directory); database: {mask_dsn(dsn)}"
    assert error.startswith("wfctl: error: cannot connect to ")

    config.chmod(0o666)
    sub = clean_env / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    refused = cli("db", "status", "--json")
    assert (refused.exit_code, refused.stdout) == (3, ""), refused.output
    assert refused.stderr == (
        f"wfctl: config: {config} (found in a parent directory of {sub}; refused: every user may "
        "write to it (mode 0666))\n" + refusal(config, "every user may write to it (mode 0666)")
    )
