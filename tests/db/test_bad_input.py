"""The bad-input catalogue: one row per way to hand wfctl something wrong.

Each row is (command line, the bad input or the setup that makes it bad, a fragment of the
expected message, the exit code from the exit-code reference's table, what the database must look like
afterwards). Every row is run against a real PostgreSQL and checked for:

- the exit code;
- the message fragment on stderr, on a single line, and nothing on stdout;
- no traceback in the output (unless the row runs with --debug);
- no password of the row's DSN anywhere in the output;
- the database unchanged: a fingerprint (every relation of the database, and a count and md5
  of every row of every table) taken after the setup and after the command must be equal;
  the two rows that must store something (quotes and SQL in a name) check that exactly that
  was stored, literally.

The catalogue is tests/support/bad_input.py. Most rows run in-process through the ``cli``
fixture, here; ``wfctl worker`` rows run as real processes (a worker imports its --app module),
in tests/process/test_bad_input_processes.py. The row number and the total are in each test id:
``pytest tests/db/test_bad_input.py -q --collect-only`` lists them.
"""

from __future__ import annotations

import pytest
from support.bad_input import IN_PROCESS, ROWS, Row, run_row


def test_catalogue_has_every_kind_of_row():
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names)), "two rows with one name"
    print(f"\nbad-input catalogue: {len(ROWS)} rows")
    assert len(ROWS) >= 100
    for needed in (
        "json-malformed",
        "jsonl-one-bad-line",
        "jsonl-non-utf8",
        "input-over-limit",
        "show-id-not-uuid",
        "cancel-id-unknown",
        "cancel-completed",
        "retry-running",
        "show-key-unknown",
        "send-id-and-to-key",
        "app-does-not-import",
        "app-registers-nothing",
        "type-with-quotes-and-sql",
        "db-unreachable-submit",
        "no-schema-metrics",
        "toml-syntax",
        "password-wrong",
    ):
        assert needed in names


@pytest.mark.parametrize("row", [row for row, _ in IN_PROCESS], ids=[id_ for _, id_ in IN_PROCESS])
def test_bad_input(row: Row, request, cli, clean_env, pg_server, wrong_password_role):
    def run(args: list[str], env: dict[str, str]):
        return cli(*args, input=row.stdin, env=env or None)

    run_row(row, request, clean_env, pg_server, wrong_password_role, run)
