"""The marked samples of every page of the documentation (README.md and docs/**/*.md), for the
tests that run them (``test_readme_samples.py``, ``test_docs_samples.py``).

A Markdown comment on the line before a code block marks it:

- ``<!-- sample: file PATH -->``: a module written to PATH. The files under ``shop/`` of every
  page make up one application, the shop (a path may be shown on one page only); other paths
  belong to their page's own project (the testing guide's ``myapp/`` and ``tests/``).
- ``<!-- sample: run -->``: a Python script run with ``WFCTL_DSN`` naming a scratch database while
  a worker runs the whole shop; ``print(...)  # text`` says what the line prints.
- ``<!-- sample: script -->``: a Python script run in its page's project with ``WFCTL_DSN`` naming
  a scratch database with the schema installed, and no worker.
- ``<!-- sample: deploy N PATH -->``: version N of a module, deployed in turn to a worker that is
  restarted each time (the ``ctx.patched`` walk-through).
- ``<!-- sample: sql -->``: SQL that a test of its page runs.
- ``<!-- sample: console -->``: a shell session; every ``wfctl`` command in it parses with
  wfctl's own command line.
- ``<!-- sample: signature -->``: a call's signature, shown as Python but not code.

A sample moved to another page stays tested: the tests read every page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from markdown_blocks import Block, blocks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SHOP = "shop/"
KINDS = {"file", "run", "script", "deploy", "sql", "console", "signature"}


@dataclass
class Samples:
    files: dict[str, str] = field(default_factory=dict)
    runs: list[Block] = field(default_factory=list)
    scripts: list[Block] = field(default_factory=list)
    deploys: dict[int, tuple[str, str]] = field(default_factory=dict)
    sql: list[str] = field(default_factory=list)
    consoles: list[Block] = field(default_factory=list)


def pages() -> list[Path]:
    """Every page of the documentation: the README and the site's pages."""
    if not README.exists():
        return []
    return [README, *sorted(DOCS.rglob("*.md"))]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@cache
def samples(page: Path) -> Samples:
    found = Samples()
    for block in blocks(page):
        if block.marker is None or not block.marker.startswith("sample:"):
            continue
        kind, _, arg = block.marker.removeprefix("sample:").strip().partition(" ")
        where = f"{name(page)}:{block.line}"
        assert kind in KINDS, f"{where}: unknown marker {block.marker!r}"
        if kind == "file":
            assert arg and not arg.startswith("/") and ".." not in arg, where
            assert arg not in found.files, f"{where}: {arg} is shown twice"
            found.files[arg] = block.text
        elif kind in ("run", "script"):
            assert block.lang == "python" and not arg, where
            (found.runs if kind == "run" else found.scripts).append(block)
        elif kind == "deploy":
            number, _, path = arg.partition(" ")
            found.deploys[int(number)] = (path, block.text)
        elif kind == "sql":
            assert block.lang == "sql", where
            found.sql.append(block.text)
        elif kind == "console":
            assert block.lang == "console", where
            found.consoles.append(block)
        else:
            assert not arg, where
    return found


def shop_files() -> dict[str, str]:
    """The shop: every page's file samples under ``shop/``, each path shown on one page."""
    found: dict[str, str] = {}
    owner: dict[str, str] = {}
    for page in pages():
        for path, text in samples(page).files.items():
            if path.startswith(SHOP):
                assert path not in found, f"{path} is shown on {owner[path]} and {name(page)}"
                found[path] = text
                owner[path] = name(page)
    return found


def page_files(page: Path) -> dict[str, str]:
    """The page's own project: its file samples outside the shop."""
    return {p: t for p, t in samples(page).files.items() if not p.startswith(SHOP)}


def every(kind: str) -> list[tuple[Path, Block]]:
    """(page, block) for every sample of a kind (``runs``, ``scripts``, ``consoles``)."""
    return [(page, block) for page in pages() for block in getattr(samples(page), kind)]


def write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root
