"""Under ``--json`` an error is JSON too: one object on stderr with the message and the exit
code, nothing on stdout, so a script that parses either stream never meets prose."""

from __future__ import annotations

import json
import uuid

import pytest

from wfctl import exits


def error_object(stderr: str) -> dict[str, object]:
    [line] = stderr.splitlines()
    found = json.loads(line)
    assert isinstance(found, dict) and set(found) == {"error", "exit_code"}
    return found


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["--json", "show", str(uuid.UUID(int=7))], exits.NOT_FOUND, "no workflow"),
        (["--json", "list", "--limit", "0"], exits.USAGE, "--limit"),
        (["list", "--status", "bogus", "--json"], exits.USAGE, "bogus"),
        (["--json", "stats", "--since", "soon"], exits.USAGE, "soon"),
    ],
    ids=["unknown-id", "bad-limit", "option-after-command", "bad-duration"],
)
def test_an_error_under_json_is_one_object_on_stderr(cli, dsn, args, code, fragment):
    result = cli("--dsn", dsn, *args)
    assert result.exit_code == code
    assert result.stdout == ""
    found = error_object(result.stderr)
    assert found["exit_code"] == code
    assert fragment in str(found["error"])
    assert not str(found["error"]).startswith("wfctl:")


def test_an_unreachable_database_under_json_is_an_object_too(cli, tmp_path):
    result = cli("--json", "--dsn", f"host={tmp_path} port=1 dbname=x connect_timeout=2", "stats")
    assert result.exit_code == exits.CONNECTION
    found = error_object(result.stderr)
    assert found["exit_code"] == exits.CONNECTION


def test_without_json_the_error_stays_one_line_of_prose(cli, dsn):
    result = cli("--dsn", dsn, "show", str(uuid.UUID(int=7)))
    assert result.exit_code == exits.NOT_FOUND
    assert result.stderr.startswith("wfctl: error: ")
    assert len(result.stderr.splitlines()) == 1


def test_a_json_value_after_a_double_dash_is_not_the_option(cli, dsn):
    result = cli("--dsn", dsn, "submit", "no-such-type", "--", "--json")
    assert result.exit_code != 0
    assert result.stderr.startswith("wfctl: error: ")


def test_under_json_a_notice_on_stderr_is_an_object_too(cli, clean_env):
    """The notice naming the database wfctl chose, before the error: both JSON lines."""
    (clean_env / "wfctl.toml").write_text("[database]\ndsn = 'host=127.0.0.1 port=1 dbname=x user=u'\n")
    result = cli("db", "status", "--json")
    assert (result.exit_code, result.stdout) == (exits.CONNECTION, "")
    notice, error = (json.loads(line) for line in result.stderr.splitlines())
    assert set(notice) == {"notice"} and "database:" in notice["notice"]
    assert error["exit_code"] == exits.CONNECTION
