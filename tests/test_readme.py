"""The exit-code reference is the contract: its table matches the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from wfctl.exits import EXIT_CODES

EXIT_CODES_PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "exit-codes.md"


@pytest.mark.skipif(not EXIT_CODES_PAGE.exists(), reason="needs the source tree")
def test_exit_code_table_matches_code():
    text = EXIT_CODES_PAGE.read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in text, f"exit code {code} missing or stale in exit-codes.md"
