"""What everything the CLI draws is made of: messages on stderr, data on stdout, Rich tables for
people and JSON for machines, and the words and numbers of the reports. The only module of the
CLI that draws with Rich; the reports built from these are wfctl/cli/render_reports.py."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:  # Rich is imported where it draws: a worker logging plain text never loads it
    from rich.console import Console, JustifyMethod
    from rich.text import Text

from wfctl.durations import format_duration
from wfctl.printable import INVISIBLE, printable
from wfctl.storedjson import Unreadable
from wfctl.words import CANCELLED, COMPLETED, FAILED, HANDLED, PENDING, RETRYING, RUNNING

#: Width of tables written to a pipe or file (a terminal uses its own width, COLUMNS wins).
PIPE_WIDTH = 200

# Stored data (types, keys, step names, errors, worker ids, JSON) is written by any client of
# the database: it is drawn as plain text, never as Rich markup, and its control and invisible
# format characters (ESC, CR, BEL, the 8-bit CSI, a right-to-left override, a zero-width space
# ...) are shown escaped (wfctl/printable.py), so that no stored string can move the cursor,
# clear the screen, retitle the terminal or show other than it is.
# What json.dumps(ensure_ascii=False) leaves raw inside strings: DEL, C1, and the invisible
# characters (a JSON escape means the same, and shows).
_JSON_RAW = re.compile(f"[\x7f-\x9f{INVISIBLE}]")


def plain(value: Any, *, keep: str = "", style: str = "") -> Text:
    """``value`` as a Rich Text: never parsed as markup, control characters escaped."""
    from rich.text import Text

    return Text(printable(str(value), keep=keep), style=style)


def _err() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


#: Where ``drawn`` sends what the reports draw on stdout while it runs (else None: stdout).
_drawing: Console | None = None


def _out() -> Console:
    from rich.console import Console

    if _drawing is not None:
        return _drawing
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=PIPE_WIDTH if piped else None)


class _Stderr:
    """How this command writes its messages on stderr: prose lines, or (``--json``) one JSON
    object per message, so that a script reading stderr never meets prose."""

    json = False


def json_stderr(on: bool) -> None:
    """Messages on stderr as JSON objects from now on (``--json``), or as prose lines."""
    _Stderr.json = on


def _json_line(**fields: object) -> None:
    # ASCII only: whatever a message quotes (a hostile type name, say) reaches no terminal raw
    sys.stderr.write(json.dumps(fields) + "\n")
    sys.stderr.flush()


def failure(message: str, code: int) -> None:
    """The error that ends the command: one line on stderr (red on a terminal), or under
    ``--json`` one JSON object, ``{"error": ..., "exit_code": ...}``."""
    if _Stderr.json:
        _json_line(error=message, exit_code=code)
        return
    console = _err()
    console.print(
        plain(f"wfctl: error: {message}", keep="\n\t", style="bold red" if console.is_terminal else "")
    )


def warn(message: str) -> None:
    if _Stderr.json:
        _json_line(warning=message)
        return
    console = _err()
    console.print(
        plain(f"wfctl: warning: {message}", keep="\n\t", style="yellow" if console.is_terminal else "")
    )


def notice(message: str) -> None:
    if _Stderr.json:
        _json_line(notice=message)
        return
    _err().print(plain(f"wfctl: {message}", keep="\n\t"))


def line(text: str) -> None:
    """One line of data on stdout, without Rich interpreting it (control characters escaped, the
    line feed included: one call, one line)."""
    sys.stdout.write(printable(text) + "\n")
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
    if isinstance(value, Unreadable):  # a stored value Python cannot read: say so in its place
        return unreadable_text(value)
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def unreadable_text(value: Unreadable) -> str:
    """The placeholder drawn for a stored JSON value Python cannot read."""
    return f"(a stored value that cannot be decoded: {value.reason})"


_PLACEHOLDER = re.compile(r'"\\u0000\d+\\u0000"')


def to_json(value: Any, indent: int | None = 2) -> str:
    """JSON text; the characters json.dumps leaves raw (DEL, C1, the invisible ones of
    wfctl/printable.py) escaped as ``\\uNNNN`` too (they can only occur inside strings, so the
    text stays valid and means the same).
    A finite Decimal (a stored number read exactly) is written with all its digits: it goes
    through json.dumps as a placeholder string, replaced afterwards by the number's text (a
    placeholder holds U+0000, which no stored string can)."""
    exact: dict[str, str] = {}

    def default(item: Any) -> Any:
        if isinstance(item, Decimal) and item.is_finite():
            token = f"\x00{len(exact)}\x00"
            exact[json.dumps(token)] = str(item)
            return token
        return _default(item)

    text = json.dumps(value, default=default, indent=indent, ensure_ascii=False)
    if exact:
        text = _PLACEHOLDER.sub(lambda m: exact.get(m.group(), m.group()), text)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(value: Any) -> None:
    sys.stdout.write(to_json(value) + "\n")
    sys.stdout.flush()


def cell(value: Any) -> Text:
    """A table cell: always text (stored strings are not markup), control characters escaped."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    if value is None:
        return Text("-")
    if isinstance(value, datetime):
        return Text(value.astimezone().strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(value, float | Decimal):
        return Text(f"{value:.2f}")
    if isinstance(value, list | dict):
        return Text(to_json(value, indent=None))
    return plain(value)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    justify: Sequence[JustifyMethod] | None = None,
) -> None:
    """A Rich table on stdout."""
    from rich.table import Table

    grid = Table(
        title=None if title is None else plain(title, style="bold"),  # a Text keeps its own style
        title_justify="left",
        header_style="bold",
    )
    for index, name in enumerate(columns):
        align = justify[index] if justify else "left"
        # ids are copied from the screen: never cut one, let the other columns wrap instead
        is_id = name == "id"
        grid.add_column(name, justify=align, no_wrap=is_id, min_width=36 if is_id else None)
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    _out().print(grid)


def key_values(title: str | None, pairs: Sequence[tuple[str, Any]]) -> None:
    from rich.table import Table

    grid = Table(
        title=None if title is None else plain(title, style="bold"),  # a Text keeps its own style
        title_justify="left",
        show_header=False,
        box=None,
    )
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in pairs:
        grid.add_row(key, cell(value))
    _out().print(grid)


# Words and numbers as the reports draw them.

STATUS_STYLES = {
    PENDING: "yellow",
    RUNNING: "cyan",
    COMPLETED: "green",
    FAILED: "bold red",
    CANCELLED: "dim",
    HANDLED: "magenta",  # a step that failed and whose StepError the workflow handled
    RETRYING: "yellow",  # a step whose tries failed so far: its run parked until the next
    "live": "green",
    "dead": "bold red",
    "stopped": "dim",
    "missing": "bold red",
    # attempt outcomes (wfctl show)
    "error": "red",
    "abandoned": "bold red",
    "released": "yellow",
    "parked": "yellow",
    "lost": "dim",
}
TIMELINE_WIDTH = 40


def styled(word: Any) -> Text:
    return plain(word, style=STATUS_STYLES.get(str(word), ""))


def seconds(value: Any) -> str:
    return format_duration(None if value is None else float(value))


def ago(value: Any) -> str:
    return "-" if value is None else f"{seconds(value)} ago"


def timeline_bar(offset: Any, duration: Any, span: float, style: str, width: int = TIMELINE_WIDTH) -> Text:
    """A bar placed at ``offset`` and ``duration`` long, on a line of ``width`` cells for ``span``."""
    from rich.text import Text

    if offset is None or span <= 0:
        return Text("")
    start = min(width - 1, max(0, int(float(offset) / span * width)))
    length = max(1, round(float(duration or 0) / span * width))
    length = min(length, width - start)
    return Text.assemble(" " * start, ("█" * length, style), " " * (width - start - length))


def heading(text: str, style: str = "bold") -> None:
    """A heading line on stdout (``Input``, ``Error``...)."""
    _out().print(plain(text, style=style))


def text_block(text: str, *, style: str = "") -> None:
    """Stored text on stdout, its line feeds and tabs kept, other control characters escaped."""
    _out().print(plain(text, keep="\n\t", style=style))


def json_block(value: Any) -> None:
    """A value as indented JSON on stdout (``to_json``)."""
    from rich.text import Text

    _out().print(Text(to_json(value)))


class _NoProgress:
    def __call__(self, n: int) -> None:
        return None


def progress(description: str, total: int) -> Any:
    """A context manager yielding ``advance(n)``: a Rich progress bar when stderr is a terminal,
    nothing otherwise."""
    from contextlib import contextmanager

    @contextmanager
    def manager() -> Any:
        if not sys.stderr.isatty():
            yield _NoProgress()
            return
        from rich.progress import Progress

        with Progress(console=_err(), transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)

    return manager()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def drawn(draw: Callable[[], None], width: int) -> Text:
    """What ``draw`` prints on stdout (a report of render_reports.py), drawn ``width`` cells
    wide, as a Rich Text with its styles: ``wfctl top`` shows ``wfctl show``'s report so."""
    import io

    from rich.console import Console
    from rich.text import Text

    global _drawing
    buffer = io.StringIO()
    previous, _drawing = (
        _drawing,
        Console(file=buffer, width=width, force_terminal=True, color_system="truecolor", highlight=False),
    )
    try:
        draw()
    finally:
        _drawing = previous
    return Text.from_ansi(buffer.getvalue())


def raw(text: str) -> None:
    """Text on stdout exactly as given."""
    sys.stdout.write(text)
    sys.stdout.flush()
