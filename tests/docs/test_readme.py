"""The exit-code reference is the contract: its table matches the code."""

from __future__ import annotations

import pytest
from helpers import REPO

from wfctl.exits import EXIT_CODES

EXIT_CODES_PAGE = REPO / "docs" / "reference" / "exit-codes.md"


@pytest.mark.skipif(not EXIT_CODES_PAGE.exists(), reason="needs the source tree")
def test_exit_code_table_matches_code():
    text = EXIT_CODES_PAGE.read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in text, f"exit code {code} missing or stale in exit-codes.md"
