"""The library raises its own exceptions, exported from ``wfctl``; only the CLI turns them into exit
codes, in ``wfctl/exits.py``

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/db/test_library_errors.py.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_library_does_not_load_the_cli():
    code = (
        "import sys, wfctl, wfctl.worker.runner, wfctl.control, wfctl.reports, wfctl.recovery\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich')"
        " or m == 'wfctl.cli' or m.startswith('wfctl.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
