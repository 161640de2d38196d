"""Inputs as the user gave them; the catalogue in
test_bad_input.py has a row for each refusal, these check what a row cannot: memory, caps,
the values stored, and what `show` draws of a value Python cannot read whole.

- the 1,000,000-byte limit counts the user's bytes (UTF-8 as given), not wfctl's escaped JSON;
- `--input-file` is read a line at a time, with a cap per line and per file, and nothing is
  stored unless every line is valid;
- JSON Lines end at LF only, and a UTF-8 BOM at the start is skipped;
- `show` draws an input nested deeper than Python reads, and an integer longer than it reads.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from support.input_stream import count

import wfctl
from wfctl.cli import jsonlines
from wfctl.errors import InvalidInput
from wfctl.validate import MAX_INPUT_BYTES


def test_python_api_limit_counts_the_values_bytes(dsn):
    wid = wfctl.submit(dsn, "order", {"text": "é" * 300_000})  # 600 KB of UTF-8, 1.8 MB escaped
    with psycopg.connect(dsn) as conn:
        stored = conn.execute("SELECT input_data FROM workflows WHERE id = %s", (wid,)).fetchone()[0]
    assert stored == {"text": "é" * 300_000}
    with pytest.raises(InvalidInput, match=f"over the limit of {MAX_INPUT_BYTES} bytes"):
        wfctl.submit(dsn, "order", "é" * (MAX_INPUT_BYTES // 2))
    assert count(dsn) == 1


def test_line_separators_and_bom():
    """str.splitlines() also splits at U+2028, U+2029 and U+0085, which JSON strings may hold."""
    values = [{"s": "a\u2028b"}, {"s": "c\u0085d\u2029e"}]
    data = b"\xef\xbb\xbf" + "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values).encode()
    assert [json.loads(t) for t in jsonlines.parse_jsonl(data, "f")] == values
    with pytest.raises(InvalidInput, match="line 2: malformed JSON"):
        jsonlines.parse_jsonl(b"1\n\xef\xbb\xbf2\n", "f")  # a BOM is skipped at the start only


def test_file_line_cap_stores_nothing(cli, dsn, clean_env, monkeypatch):
    monkeypatch.setattr(jsonlines, "MAX_FILE_LINES", 5)
    (clean_env / "in.jsonl").write_text("{}\n" * 6)
    result = cli("submit", "order", "--input-file", "in.jsonl", "--dsn", dsn)
    assert result.exit_code == 2, result.output
    assert "in.jsonl has more than 5 lines" in result.stderr and "nothing was submitted" in result.stderr
    assert result.stderr.count("\n") == 1 and count(dsn) == 0
    (clean_env / "in.jsonl").write_text("{}\n" * 5)
    assert cli("submit", "order", "--input-file", "in.jsonl", "--dsn", dsn).exit_code == 0
    assert count(dsn) == 5


def test_bad_last_line_of_a_big_file_stores_nothing(cli, dsn, clean_env):
    """Validation still comes first: batches are never sent before the last line is checked."""
    lines = [json.dumps({"n": i}) for i in range(2500)] + ['{"n": oops}']
    (clean_env / "in.jsonl").write_text("\n".join(lines) + "\n")
    result = cli("submit", "order", "--input-file", "in.jsonl", "--dsn", dsn)
    assert result.exit_code == 2 and "line 2501" in result.stderr and count(dsn) == 0


def test_show_draws_what_python_cannot_read_whole(cli, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        wid = str(
            conn.execute(
                "INSERT INTO workflows (workflow_type, input_data, output_data)"
                " VALUES ('deep', %s::jsonb, %s::jsonb) RETURNING id",
                ("[" * 5000 + "1" + "]" * 5000, '{"n": ' + "7" * 5000 + ', "m": 1}'),
            ).fetchone()[0]
        )
    shown = cli("show", wid, "--dsn", dsn)
    assert shown.exit_code == 0, shown.output[-2000:]
    assert "nested deeper than 500 levels: not shown" in shown.stdout
    assert "an integer of 5000 digits: not shown" in shown.stdout
    as_json = cli("show", wid, "--json", "--dsn", dsn)
    assert as_json.exit_code == 0, as_json.output[-2000:]
    detail = json.loads(as_json.stdout)["workflow"]
    assert detail["output_data"]["m"] == 1 and detail["output_data"]["n"].startswith("77777")
    depth, value = 0, detail["input_data"]
    while isinstance(value, list):
        depth, value = depth + 1, value[0]
    assert depth == 500 and "nested deeper" in value


def test_show_of_an_ordinary_workflow_is_unchanged(cli, dsn):
    wid = wfctl.submit(dsn, "order", {"n": [1, 2.5, "x"], "deep": [[[[]]]]})
    detail = json.loads(cli("show", str(wid), "--json", "--dsn", dsn).stdout)["workflow"]
    assert detail["input_data"] == {"n": [1, 2.5, "x"], "deep": [[[[]]]]}
