"""The completion scripts offer values from the database through `wfctl complete-values`
(bash, as a user's shell runs it: the script calls `wfctl` from PATH), and offer nothing, saying
nothing, when no database answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, isolated_env
from support.completion import seed

BASH = REPO / "completions" / "wfctl.bash"
pytestmark = pytest.mark.skipif(not BASH.is_file(), reason="needs the source tree")


@pytest.fixture
def known(conn, dsn, run_wfctl):
    return seed(conn, dsn, run_wfctl)


def complete(words: str, env: dict[str, str]) -> list[str]:
    parts = words.split(" ")
    script = (
        f"source {BASH}\n"
        f"COMP_WORDS=({' '.join(repr(p) for p in parts)}); COMP_CWORD={len(parts) - 1}\n"
        "_wfctl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split()


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The completion script calls `wfctl` from PATH: this interpreter's."""
    env = isolated_env(**extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["WFCTL_CONFIG_CEILING"] = str(tmp_path)
    return env


def test_bash_offers_types_ids_topics_and_schedules_from_the_database(dsn, known, tmp_path):
    env = shell_env(tmp_path, WFCTL_DSN=dsn)
    assert complete("wfctl submit ", env) == ["order", "refund"]
    assert complete("wfctl stats --type r", env) == ["refund"]
    assert sorted(complete("wfctl show ", env)) == sorted([known["parked"], known["done"]])
    assert complete(f"wfctl send {known['parked']} ", env) == ["approval"]
    assert complete("wfctl schedule pause n", env) == ["nightly"]
    assert "nightly" not in complete("wfctl schedule add ", env)  # a new name: none offered
    assert complete("wfctl completion z", env) == ["zsh"]


def test_without_a_database_completion_offers_nothing_and_says_nothing(tmp_path, run_wfctl):
    env = shell_env(tmp_path, WFCTL_DSN=f"host={tmp_path} port=1 dbname=none")
    assert complete("wfctl show ", env) == []
    result = run_wfctl("complete-values", "types", env={"WFCTL_DSN": f"host={tmp_path} port=1 dbname=none"})
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
