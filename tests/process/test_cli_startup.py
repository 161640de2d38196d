"""What a command loads when it starts: a fresh interpreter importing the command line, as
every `wfctl` command does, loads the worker engine only for the command that runs it."""

from __future__ import annotations

import subprocess
import sys


def test_a_command_loads_the_engine_only_when_it_runs_a_worker():
    """Every command starts by importing the command line; the worker engine (its loop,
    threads and the modules they need) is imported by `wfctl worker` when it runs, not by a
    `wfctl submit` or `wfctl stats` that never uses it."""
    probe = (
        "import sys, wfctl.cli.app; print(sorted(m for m in sys.modules if m.startswith('wfctl.worker.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "wfctl.worker.runner" not in loaded, loaded
