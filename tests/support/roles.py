"""What tests/db/test_roles.py and tests/process/test_roles_processes.py share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from roles import Roles


@pytest.fixture
def jobs(cli, dsn: str) -> Iterator[tuple[Roles, dict[str, str]]]:
    made = Roles(dsn)
    try:
        names = {job: made.create(f"wfctl_{job}") for job in ("worker", "submit", "read")}
        result = cli(
            "init", "--dsn", dsn, "--grant-worker", names["worker"],
            "--grant-submit", names["submit"], "--grant-read", names["read"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"granted role '{names['submit']}' submit, send and read a result by id" in result.stderr
        yield made, names
    finally:
        made.drop_all()
