"""Shell completion of values from the database (wfctl/cli/candidates.py): the types workers
registered, the newest run ids, the topic a run waits on, the schedule names; and nothing at
all when no database answers (the completion scripts calling it: tests/process/
test_completion_shell.py)."""

from __future__ import annotations

import pytest
from support.completion import seed

from wfctl.cli import candidates


@pytest.fixture
def known(conn, dsn, cli):
    return seed(conn, dsn, cli)


def test_each_kind_offers_what_the_database_holds(dsn, known):
    assert candidates.lookup(dsn, "types") == ["order", "refund"]
    assert candidates.lookup(dsn, "types", "re") == ["refund"]
    assert sorted(candidates.lookup(dsn, "ids")) == sorted([known["parked"], known["done"]])
    assert candidates.lookup(dsn, "ids", known["done"][:13]) == [known["done"]]
    assert candidates.lookup(dsn, "topics", "", known["parked"]) == ["approval"]
    assert candidates.lookup(dsn, "topics", "", known["done"]) == []
    assert candidates.lookup(dsn, "schedules") == ["hourly", "nightly"]


def test_a_prefix_is_literal_not_a_pattern(dsn, known):
    assert candidates.lookup(dsn, "types", "_") == []
    assert candidates.lookup(dsn, "types", "%") == []


def test_the_values_command_is_not_in_the_help(cli):
    assert "complete-values" not in cli("--help").stdout
