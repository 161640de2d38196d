"""The SQL wfctl runs, loaded from the named blocks of ``sql/queries/*.sql``.

A block starts with a line ``-- name: <name>`` and runs to the next such line. Blocks are
addressed as ``"<file stem>.<name>"`` (``q("worker.claim")``). Parameters use psycopg's
``%(name)s`` style; identifiers that must be composed use ``{name}`` and ``psycopg.sql``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from psycopg import sql

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_root() -> Path:
    """The ``sql/`` directory: inside the installed package, or the source tree's top level."""
    packaged = resources.files("wfctl") / "sql"
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / "sql"
    if source.is_dir():
        return source
    raise RuntimeError("wfctl's SQL files are missing from this installation")


def parse_blocks(text: str) -> dict[str, str]:
    """Split a file of named blocks into {name: statement}."""
    blocks: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group(1)
        if name in blocks:
            raise ValueError(f"duplicate query name {name!r}")
        blocks[name] = body.rstrip(";").strip() if body.count(";") <= 1 else body
    return blocks


@cache
def all_queries() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted((sql_root() / "queries").glob("*.sql")):
        for name, body in parse_blocks(path.read_text(encoding="utf-8")).items():
            out[f"{path.stem}.{name}"] = body
    return out


def q(name: str) -> str:
    """The statement called ``name``, such as ``"worker.claim"``."""
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no SQL block named {name!r} in {sql_root() / 'queries'}") from None


@cache
def composed(block: str, **identifiers: str | tuple[str, ...]) -> sql.Composed:
    """A block with ``{placeholders}`` filled by quoted identifiers (for DDL such as
    ``CREATE DATABASE``, or a partition's ``(schema, name)``), never by string formatting.
    Cached: the group commit composes its statement for every batch."""
    names = {k: v if isinstance(v, tuple) else (v,) for k, v in identifiers.items()}
    return sql.SQL(q(block)).format(**{k: sql.Identifier(*v) for k, v in names.items()})


@cache
def spliced(block: str, part: str) -> str:
    """Block ``block`` with block ``part`` in place of its marker ``/* <part's name> */`` (the
    name after the file stem): both are named blocks of sql/, so only shipped SQL is joined."""
    marker = f"/* {part.split('.', 1)[-1]} */"
    text = q(block)
    if marker not in text:
        raise KeyError(f"no marker {marker} in the SQL block {block!r}")
    return text.replace(marker, q(part))


_PLACEHOLDER = re.compile(r"%\((?P<name>\w+)\)s|%%|%s")


@dataclass(frozen=True)
class Numbered:
    """A block rewritten once for the hot path: its comment lines but the first dropped, its named
    placeholders numbered (``$1``, ``$2``: PostgreSQL's own), to run on a ``psycopg.RawCursor``
    with ``args(values)``. psycopg parses a ``%(name)s`` statement on every execution when it
    is longer than it caches (4 KB; the claim and the group commit are), and composes a
    ``sql.Composed`` anew each time: a statement a worker runs for every batch pays neither."""

    text: bytes
    names: tuple[str, ...]

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        """The parameters in placeholder order, from ``values`` by name."""
        return [values[name] for name in self.names]


@cache
def numbered(block: str, **identifiers: str | tuple[str, ...]) -> Numbered:
    """Block ``block``, with ``{placeholders}`` filled by quoted identifiers as ``composed``
    does, as a Numbered statement."""
    return _numbered(composed(block, **identifiers).as_string() if identifiers else q(block))


@cache
def numbered_spliced(block: str, part: str) -> Numbered:
    """Block ``block`` with block ``part`` spliced in, as ``spliced`` does, as a Numbered
    statement."""
    return _numbered(spliced(block, part))


def _numbered(text: str) -> Numbered:
    # the first line stays, comment or not: it names the statement in pg_stat_activity and
    # pg_stat_statements ("-- Group commit: ...")
    first, *rest = text.splitlines()
    kept = "\n".join([first, *(line for line in rest if not line.lstrip().startswith("--"))])
    order: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group("name")
        if name is not None:
            return f"${order.setdefault(name, len(order) + 1)}"
        if match.group() == "%s":
            raise ValueError(f"a numbered statement takes named placeholders only, not %s: {first!r}")
        return "%"

    return Numbered(_PLACEHOLDER.sub(number, kept).encode(), tuple(order))
