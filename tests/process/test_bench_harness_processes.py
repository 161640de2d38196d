"""The benchmarks' shared harness (bench/harness.py): the claim's parameters it passes are the
worker's, the source trees of an A/B, the frame every entry point's main runs in, and the
interleaving of the rounds. The benchmarks themselves run in tests/test_bench_*.py.

The tests of it that start processes (wfctl, a server, a build); those that need only the database
are in tests/unit/test_bench_harness.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

from bench import harness

# bench/ is not part of the installed package: it is imported from the source tree (as
# `python -m bench.NAME` run from there does)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def test_a_commit_is_archived_into_a_tree_of_its_own(tmp_path: Path):
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    code = harness.resolve_code("HEAD", tmp_path)
    assert code.label.startswith("commit ")
    assert code.root.parent == tmp_path and (code.root / "wfctl" / "__init__.py").is_file()
    assert code.env()["PYTHONPATH"] == str(code.root)
