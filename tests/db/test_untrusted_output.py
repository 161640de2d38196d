"""Stored data is text, never Rich markup and never terminal control.

Every value below is inserted with SQL, as any client of the shared database could, and read back
through the CLI: `list`, `stats`, `show`, `workers`, `recover --dry-run`. Nothing may crash with
a MarkupError, markup must show literally, and no control character may reach the output raw
(CliRunner's output is not a terminal, so Rich itself writes no escape sequence: any ESC byte
would come from the data); nor may a character that changes how text shows without showing
itself (a right-to-left override, a zero-width space, a line separator).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from report_rows import db_now, runner, step, worker, workflow

from wfctl.cli import render

ESC = "\x1b"
CLEAR = f"{ESC}[2J"  # erase the screen
TITLE = f"{ESC}]0;pwned{chr(7)}"  # OSC: set the window title, ended by BEL
CSI_C1 = "\x9b31m"  # the 8-bit CSI (C1): red
RTL = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "ord\u202eredro" shows as "ordorder"
# anything but the line feed; the bidirectional controls, zero-width characters, U+2028/U+2029
RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)


def assert_clean(text: str) -> None:
    found = RAW_CONTROL.findall(text)
    assert not found, f"raw control characters in the output: {found!r}"


@pytest.fixture
def wfctl(clean_env):
    return runner()


@pytest.fixture
def hostile(conn):
    """Workflows, steps and workers whose every stored string is markup or control."""
    now = db_now(conn)
    worker(conn, now, "[/w]host:1:x", silent=timedelta(minutes=20))
    pay = workflow(
        conn,
        now,
        workflow_type="pay[/x]",
        status="failed",
        error_message=f"bad token [/b] {CLEAR}{TITLE}",
        idempotency_key="[/k]",
        input_data=json.dumps({"note": f"[bold]hi[/bold] {ESC}[31m {CSI_C1} \x85 \x7f"}),
        output_data=json.dumps({"[/o]": "x"}),
        lease_owner="[/w]host:1:x",
    )
    start = now - timedelta(minutes=59)
    step(conn, pay, 1, "charge[/s]", start=start, seconds=1, output_data='"ok"')
    step(
        conn,
        pay,
        2,
        f"ship{ESC}[2K",
        start=start + timedelta(seconds=2),
        seconds=1,
        status="failed",
        error_message=f"[/e] carrier down {TITLE}",
    )
    red = workflow(conn, now, workflow_type="[red]ok[/red]", status="completed")
    step(conn, red, 1, "[/]", start=start, seconds=2)
    bidi = workflow(
        conn,
        now,
        workflow_type=f"ord{RTL}redro",
        status="failed",
        error_message="card\u2028declined\u200b \u2066x\u2069\ufeff",
    )
    step(conn, bidi, 1, "ch\u200barge\u200f", start=start, seconds=1)
    ctrl = workflow(conn, now, workflow_type=f"ctl{CSI_C1}\r\x07x", status="completed")
    step(conn, ctrl, 1, f"s{CLEAR}", start=start, seconds=3)
    stuck = workflow(
        conn,
        now,
        workflow_type=f"stuck{TITLE}",
        status="running",
        lease_owner="[/w]host:1:x",
        current_step=1,
    )
    step(conn, stuck, 1, "[/step]", start=start, seconds=1)
    return {"pay": pay, "red": red, "ctrl": ctrl, "stuck": stuck, "bidi": bidi}


def test_list_shows_markup_and_control_as_text(wfctl, dsn, hostile):
    result = wfctl("list", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pay[/x]" in out and "[red]ok[/red]" in out
    assert "bad token [/b] \\x1b[2J\\x1b]0;pwned\\x07" in out
    assert "ctl\\x9b31m\\x0d\\x07x" in out
    assert "stuck\\x1b]0;pwned\\x07" in out
    assert_clean(result.output)


def test_stats_shows_markup_and_control_as_text(wfctl, dsn, hostile):
    result = wfctl("stats", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("pay[/x]", "charge[/s]", "[red]ok[/red]", "[/]", "ctl\\x9b31m\\x0d\\x07x", "s\\x1b[2J"):
        assert text in out, text
    stuck = out[out.index("Stuck runs") :]
    assert "stuck\\x1b]0;pwned\\x07" in stuck and "1 [/step]" in stuck and "[/w]host:1:x" in stuck
    assert_clean(result.output)


def test_stats_of_one_hostile_type_says_so_in_plain_text(wfctl, dsn, hostile):
    result = wfctl("stats", "--dsn", dsn, "--type", f"none{TITLE}[/t]")
    # "no workflows of type ..." (0), or the type refused as bad input (2): either way one
    # plain-text line, never a crash
    assert result.exit_code in (0, 2), result.output
    assert "[/t]" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert_clean(result.output)


def test_show_renders_every_stored_string_as_text(wfctl, dsn, hostile):
    result = wfctl("show", str(hostile["pay"]), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        "pay[/x]",
        "[/k]",
        "[/w]host:1:x",
        "bad token [/b] \\x1b[2J\\x1b]0;pwned\\x07",
        "charge[/s]",
        "ship\\x1b[2K",
        "[/e] carrier down \\x1b]0;pwned\\x07",
        '"[/o]": "x"',
    ):
        assert text in out, text
    # the input is JSON: its own escapes, valid JSON for the C1 and DEL characters too
    note = next(line for line in out.splitlines() if '"note"' in line)
    assert json.loads("{" + note.strip() + "}")["note"] == f"[bold]hi[/bold] {ESC}[31m {CSI_C1} \x85 \x7f"
    assert_clean(result.output)


def test_json_output_escapes_c1_controls_too(wfctl, dsn, hostile):
    result = wfctl("show", str(hostile["pay"]), "--dsn", dsn, "--json")
    assert result.exit_code == 0, result.output
    assert_clean(result.stdout.replace("\n", ""))
    data = json.loads(result.stdout)
    assert data["workflow"]["input_data"]["note"].endswith(f"{CSI_C1} \x85 \x7f")
    assert data["workflow"]["error_message"] == f"bad token [/b] {CLEAR}{TITLE}"


def test_workers_and_recover_lines_are_text(wfctl, dsn, hostile):
    table = wfctl("workers", "--dsn", dsn)
    assert table.exit_code == 0, table.output
    assert "[/w]host:1:x" in table.stdout
    assert_clean(table.output)
    dry = wfctl("recover", "--stale", "5m", "--dry-run", "--dsn", dsn)
    assert dry.exit_code == 0, dry.output
    assert "stuck\\x1b]0;pwned\\x07" in dry.stdout and "worker=[/w]host:1:x" in dry.stdout
    assert_clean(dry.output)


def test_printable_escapes_control_and_invisible_characters_only():
    assert render.printable("a\x1bb\x9bc\x7fd\te\nf") == "a\\x1bb\\x9bc\\x7fd\\x09e\\x0af"
    assert render.printable("line\nnext\tcol\x1b", keep="\n\t") == "line\nnext\tcol\\x1b"
    assert (
        render.printable(f"ord{RTL}redro \u2028\u200b\ufeff\u2066")
        == "ord\\u202eredro \\u2028\\u200b\\ufeff\\u2066"
    )
    assert render.printable("[red]é ✓ 日本 עברית 🙂") == "[red]é ✓ 日本 עברית 🙂"


def test_bidi_and_zero_width_characters_show_escaped(wfctl, dsn, hostile):
    for args in (("list",), ("stats",), ("show", str(hostile["bidi"]))):
        result = wfctl(*args, "--dsn", dsn)
        assert result.exit_code == 0, result.output
        assert "ord\\u202eredro" in result.stdout, args
        assert_clean(result.output)
    shown = wfctl("show", str(hostile["bidi"]), "--dsn", dsn).stdout
    assert "card\\u2028declined\\u200b \\u2066x\\u2069\\ufeff" in shown
    assert "ch\\u200barge\\u200f" in shown
    as_json = wfctl("show", str(hostile["bidi"]), "--dsn", dsn, "--json")
    assert_clean(as_json.stdout)  # JSON escapes them: \u202e
    assert json.loads(as_json.stdout)["workflow"]["workflow_type"] == f"ord{RTL}redro"
