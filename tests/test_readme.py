"""The README is the contract: its exit-code table matches the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from wfctl.exits import EXIT_CODES

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.skipif(not README.exists(), reason="needs the source tree")
def test_exit_code_table_matches_code():
    text = README.read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in text, f"exit code {code} missing or stale in README"
