"""The fenced code blocks of a Markdown file, for the tests that hold the README and docs/ to
the files and code they show (``test_examples.py``, ``test_docs_samples.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_MARKER = re.compile(r"^<!--\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    lang: str  # the first word after the opening fence ("" when none)
    text: str  # the lines between the fences, each ending with a line feed
    line: int  # the opening fence's line number, from 1
    marker: str | None  # the text of an HTML comment on the line before the fence, if any


def blocks(path: Path) -> list[Block]:
    """Every top-level fenced block (``` fences at the start of a line) of ``path``."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = lines[index]
        if not opening.startswith("```"):
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        assert index < len(lines), f"{path.name}:{start + 1}: a code block is not closed"
        before = lines[start - 1].strip() if start > 0 else ""
        marker = _MARKER.match(before)
        info = opening[3:].strip().split()
        found.append(
            Block(
                lang=info[0] if info else "",
                text="".join(line + "\n" for line in body),
                line=start + 1,
                marker=marker.group(1) if marker else None,
            )
        )
        index += 1
    return found
