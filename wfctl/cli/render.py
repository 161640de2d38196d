"""Everything the CLI draws: messages on stderr, data on stdout, Rich tables for people and JSON
for machines. The only module of the CLI that imports Rich."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.table import Table


def _err() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def _out() -> Console:
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    """One line on stderr; red on a terminal."""
    console = _err()
    console.print(f"wfctl: error: {message}", style="bold red" if console.is_terminal else None, markup=False)


def warn(message: str) -> None:
    console = _err()
    console.print(f"wfctl: warning: {message}", style="yellow" if console.is_terminal else None, markup=False)


def notice(message: str) -> None:
    _err().print(f"wfctl: {message}", markup=False)


def line(text: str) -> None:
    """One line of data on stdout, without Rich interpreting it."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, UUID):
        return str(value)
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def to_json(value: Any) -> str:
    return json.dumps(value, default=_default, indent=2, ensure_ascii=False)


def print_json(value: Any) -> None:
    sys.stdout.write(to_json(value) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float | Decimal):
        return f"{value:.2f}"
    if isinstance(value, list | dict):
        return json.dumps(value, default=_default)
    return str(value)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    justify: Sequence[str] | None = None,
) -> None:
    """A Rich table on stdout."""
    grid = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for index, name in enumerate(columns):
        align = justify[index] if justify else "left"
        grid.add_column(name, justify=align)  # type: ignore[arg-type]
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    _out().print(grid)


def key_values(title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
    grid = Table(title=title, title_justify="left", title_style="bold", show_header=False, box=None)
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in pairs:
        grid.add_row(key, cell(value))
    _out().print(grid)
