"""What tests/db/test_cli_waits.py and tests/process/test_cli_waits_workers.py share."""

from __future__ import annotations

import json
from typing import Any


def show(cli, dsn: str, wid: object) -> str:
    result = cli("show", str(wid), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    return result.stdout


def show_json(cli, dsn: str, wid: object) -> dict[str, Any]:
    result = cli("show", str(wid), "--dsn", dsn, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def line_of(text: str, label: str) -> str:
    """The line of ``show``'s key-value table that starts with ``label``."""
    found = [line.strip() for line in text.splitlines() if line.strip().startswith(label + " ")]
    assert len(found) == 1, f"no single line {label!r} in:\n{text}"
    return found[0]
