"""A command leaves the interpreter nothing to collect at its exit: the CLI's entry point
freezes its objects as it returns, whether the command succeeded or not (the collections at
exit over every loaded module's objects took longer than many commands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import hermetic, isolated_env

# what the console script runs, then how many objects are frozen once it has returned
PROBE = """
import gc, sys
from wfctl.cli.app import main
sys.argv = ["wfctl", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
print(f"frozen={gc.get_freeze_count()} exit={code}")
"""


@pytest.mark.parametrize(("args", "exit_code"), [(("--version",), 0), (("no-such-command",), 2)])
def test_the_entry_point_freezes_what_it_holds_before_the_exit(
    tmp_path: Path, args: tuple[str, ...], exit_code: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=tmp_path,
        env=hermetic(isolated_env(), tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    last = done.stdout.strip().splitlines()[-1]
    frozen, code = (int(part.split("=")[1]) for part in last.split())
    assert code == exit_code, done.stderr
    assert frozen > 1000, last  # every module's objects, not a handful
