"""The SQL wfctl runs, loaded from the named blocks of ``sql/queries/*.sql``.

A block starts with a line ``-- name: <name>`` and runs to the next such line. Blocks are
addressed as ``"<file stem>.<name>"`` (``q("worker.claim")``). Parameters use psycopg's
``%(name)s`` style; identifiers that must be composed use ``{name}`` and ``psycopg.sql``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path

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
