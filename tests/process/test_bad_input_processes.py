"""The rows of the bad-input catalogue (tests/support/bad_input.py) that run as a real ``python -m
wfctl`` process: ``wfctl worker`` imports its --app module. The others, and the catalogue's own
checks, are in tests/db/test_bad_input.py."""

from __future__ import annotations

import pytest
from helpers import APPS
from support.bad_input import AS_PROCESS, Row, run_row


@pytest.mark.parametrize("row", [row for row, _ in AS_PROCESS], ids=[id_ for _, id_ in AS_PROCESS])
def test_bad_input_as_a_process(row: Row, request, run_wfctl, clean_env, pg_server, wrong_password_role):
    assert row.stdin is None

    def run(args: list[str], env: dict[str, str]):
        return run_wfctl(*args, env=env, cwd=APPS if row.cwd == "apps" else clean_env, timeout=120)

    run_row(row, request, clean_env, pg_server, wrong_password_role, run)
