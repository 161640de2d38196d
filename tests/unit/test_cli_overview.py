"""`wfctl --help`, the overview: every command with the first sentence of its help whole (never
cut at the terminal's width), and a command beside its plural."""

from __future__ import annotations

import re

import typer

from wfctl.cli.app import app, first_sentence
from wfctl.cli.clicompat import Context


def overview(cli) -> dict[str, str]:
    """Command name -> its description, joined across wrapped lines, from ``wfctl --help``."""
    result = cli("--help")
    assert result.exit_code == 0
    rows: dict[str, str] = {}
    name = None
    for line in result.stdout.split("Commands:", 1)[1].splitlines():
        found = re.match(r"^  (\S+)\s+(.*)$", line)
        if found:
            name = found.group(1)
            rows[name] = found.group(2)
        elif line.strip() and name is not None:
            rows[name] += " " + line.strip()
    return rows


def test_each_command_shows_its_first_sentence_whole(cli):
    group = typer.main.get_command(app)
    ctx = Context(group)
    rows = overview(cli)
    shown = [n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden]  # type: ignore[attr-defined]
    assert list(rows) == shown
    for name, shown in rows.items():
        command = group.get_command(ctx, name)  # type: ignore[attr-defined]
        assert shown == first_sentence(command.help), name
        assert not shown.endswith("..."), name
        assert shown.endswith("."), name


def test_a_command_sits_just_before_its_plural(cli):
    names = list(overview(cli))
    for single, plural in [("schedule", "schedules"), ("limit", "limits"), ("worker", "workers")]:
        assert single in names and plural in names
    assert names.index("schedules") == names.index("schedule") + 1
    assert names.index("limits") == names.index("limit") + 1


def test_the_first_sentence_ends_at_its_full_stop_not_inside_a_word():
    assert first_sentence("Run workflows until SIGTERM. It claims them.") == "Run workflows until SIGTERM."
    assert first_sentence("Uses wfctl.toml when\n  found. More.") == "Uses wfctl.toml when found."
    assert first_sentence("No stop at all") == "No stop at all"
