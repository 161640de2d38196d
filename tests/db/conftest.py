"""The database tier: the engine's SQL, the library and the in-process CLI against a real server,
with no process started. A test here that asks for worker processes or runs wfctl as a process
fails, and belongs in tests/process (CI runs this tier on every server version and layout, and
the process tier once)."""

from __future__ import annotations

import pytest


@pytest.fixture
def workers() -> None:
    pytest.fail("a database-tier test asked for worker processes: it belongs in tests/process", pytrace=False)


@pytest.fixture
def run_wfctl() -> None:
    pytest.fail("a database-tier test ran wfctl as a process: it belongs in tests/process", pytrace=False)
