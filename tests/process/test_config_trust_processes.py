"""Which wfctl.toml found by searching wfctl trusts, and where the search stops.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_config_trust.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import rows
from support.config_trust import as_root, nobody, refusal, shared_dir

from wfctl.embedded import EmbeddedServer


def planted(directory: Path, body: str) -> Path:
    """A wfctl.toml that the user nobody put in ``directory``."""
    path = directory / "wfctl.toml"
    path.write_text(body)
    os.chown(path, *nobody())
    return path


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
