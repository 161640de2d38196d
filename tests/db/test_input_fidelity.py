"""JSON numbers arrive as the user wrote them, never through a float."""

from __future__ import annotations

from decimal import Decimal

import pytest

from wfctl import jsonvalue


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("0.12345678901234567890123", "0.12345678901234567890123"),
        ("12345678901234567890.5", "12345678901234567890.5"),
        (
            '{"price": 19.90, "n": [1.000000000000000000001]}',
            '{"n": [1.000000000000000000001], "price": 19.90}',
        ),
        ("[-0.0, 1e-7]", "[0.0, 0.0000001]"),  # the same numbers, as numeric writes them
    ],
)
def test_cli_input_numbers_are_stored_as_written(cli, dsn, conn, given, stored):
    result = cli("submit", "anything", given, "--dsn", dsn)
    assert result.exit_code == 0, result.output
    wid = result.stdout.strip()
    assert conn.execute("SELECT input_data::text FROM workflows WHERE id = %s", (wid,)).fetchone() == (
        stored,
    )


def test_input_file_numbers_are_stored_as_written(cli, dsn, conn, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"x": 0.12345678901234567890123}\n{"x": 12345678901234567890.5}\n')
    result = cli("submit", "anything", "--input-file", str(path), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    stored = {r[0] for r in conn.execute("SELECT input_data->>'x' FROM workflows").fetchall()}
    assert stored == {"0.12345678901234567890123", "12345678901234567890.5"}


def test_a_decimal_step_result_is_stored_exactly(conn):
    text = jsonvalue.dumps({"total": Decimal("1234567890.123456789012345")})
    assert conn.execute("SELECT (%s::jsonb)->>'total'", (text,)).fetchone() == ("1234567890.123456789012345",)


@pytest.mark.parametrize("given", ["1e999999", "1e-99999", "NaN", "Infinity"])
def test_numbers_postgres_cannot_hold_are_usage_errors(cli, dsn, conn, given):
    result = cli("submit", "anything", given, "--dsn", dsn)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert conn.execute("SELECT count(*) FROM workflows").fetchone() == (0,)


def test_show_prints_stored_numbers_with_every_digit(cli, dsn):
    wid = cli("submit", "anything", '{"x": 0.12345678901234567890123, "n": 7}', "--dsn", dsn).stdout.strip()
    table = cli("show", wid, "--dsn", dsn)
    assert table.exit_code == 0, table.output
    assert "0.12345678901234567890123" in table.stdout
    as_json = cli("show", wid, "--json", "--dsn", dsn)
    assert as_json.exit_code == 0, as_json.output
    assert '"x": 0.12345678901234567890123' in as_json.stdout and '"n": 7' in as_json.stdout
