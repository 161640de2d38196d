"""The unit tier: no server. A test here that asks for one (``pg_server`` and every fixture built
on it: ``dsn``, ``conn``, ``empty_dsn``) fails, and belongs in tests/db."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pg_server() -> None:
    pytest.fail("a unit test asked for the database server: it belongs in tests/db", pytrace=False)
