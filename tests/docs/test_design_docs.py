"""The explanation pages (docs/explanation/) and the decision records (docs/decisions/) name only
what exists, link only to what exists, and stay within their budget.

The names are read from the pages' inline code: a path under wfctl/, sql/, tests/, bench/ or
examples/ must be a file; ``module.name`` (a module of the package, ``wfctl.module``, or a
file of sql/queries/) must be a top-level name of that module or a named SQL block;
``Class.name`` must be an attribute of a class of the package (its bases included); a
``wfctl_...`` identifier must appear in sql/ or in the package. Without a database.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from helpers import HERE

from wfctl.queries import all_queries

ROOT = HERE.parent
EXPLANATION = ROOT / "docs" / "explanation"
DECISIONS = ROOT / "docs" / "decisions"
#: "At most about 800 lines in all" for the explanation pages.
EXPLANATION_BUDGET = 820
#: Placeholders of the recipe for a new primitive, not names of the code.
PLACEHOLDERS = {"wfctl_x_step"}
#: Areas of the site other engineers own: a link there is checked against the agreed layout only.
OTHER_AREAS = re.compile(r"^\.\./(reference|guides|tutorial)/[\w./-]+\.md(#[\w-]+)?$|^\.\./index\.md$")

_PATH = re.compile(r"(?:wfctl|sql|tests|bench|examples)/[\w./-]*\.(?:py|sql|yaml|cron|service|md)")
_DOTTED = re.compile(r"(?:wfctl\.)?([A-Za-z_]\w*)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\(.*\))?")
_SQL_NAME = re.compile(r"\bwfctl_[a-z0-9_]*[a-z0-9]\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FILE_SUFFIXES = {"py", "toml", "sql", "md", "yaml", "json", "txt"}


@dataclass
class Code:
    """What the package defines: each module's top-level names (by the module's file stem, and
    the package's own under ``wfctl``), and each class's attributes with its bases' names."""

    modules: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)
    bases: dict[str, list[str]] = field(default_factory=dict)
    text: str = ""

    def class_has(self, cls: str, attr: str, seen: frozenset[str] = frozenset()) -> bool:
        if attr in self.classes.get(cls, ()):
            return True
        return any(self.class_has(b, attr, seen | {cls}) for b in self.bases.get(cls, ()) if b not in seen)


def _class_attributes(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, ast.AnnAssign):
            targets = [sub.target]
        for target in targets:
            for elt in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(elt, ast.Name):
                    names.add(elt.id)
                elif isinstance(elt, ast.Attribute):
                    names.add(elt.attr)
    return names


@cache
def code() -> Code:
    found = Code()
    texts = []
    for path in sorted((ROOT / "wfctl").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        texts.append(source)
        tree = ast.parse(source)
        names: set[str] = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                found.classes.setdefault(node.name, set()).update(_class_attributes(node))
                bases = [b for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]
                found.bases.setdefault(node.name, []).extend(
                    b.id if isinstance(b, ast.Name) else b.attr for b in bases
                )
            if isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
        stem = path.parent.name if path.stem == "__init__" else path.stem
        found.modules.setdefault(stem, set()).update(names)
        # wfctl.<module> is the module itself
        found.modules.setdefault("wfctl", set()).add(stem)
    sql = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "sql").rglob("*.sql")))
    found.text = "\n".join(texts) + "\n" + sql
    return found


def stale_names(text: str) -> list[str]:
    """What the inline code of ``text`` names that does not exist."""
    found = code()
    blocks = set(all_queries())
    stale: list[str] = []
    for match in re.finditer(r"`([^`\n]+)`", text):
        span = match.group(1)
        for path in _PATH.findall(span):
            if not (ROOT / path).exists():
                stale.append(path)
        dotted = _DOTTED.fullmatch(span)
        if dotted and dotted.group(2) not in _FILE_SUFFIXES:
            first, second, third = dotted.groups()
            if f"{first}.{second}" in blocks:
                pass
            elif first in found.classes:
                if not found.class_has(first, second):
                    stale.append(span)
            elif first in found.modules:
                missing = second not in found.modules[first]
                no_attribute = bool(third) and second in found.classes and not found.class_has(second, third)
                if missing or no_attribute:
                    stale.append(span)
        for name in _SQL_NAME.findall(span):
            if name not in PLACEHOLDERS and name not in found.text:
                stale.append(name)
    return stale


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"`", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[\s-]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+://", target):
            continue
        if OTHER_AREAS.match(target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        inside = dest.is_relative_to(EXPLANATION) or dest.is_relative_to(DECISIONS)
        if not inside or not dest.is_file() or (anchor and anchor not in anchors(dest)):
            broken.append(target)
    return broken


def pages() -> list[Path]:
    return sorted(EXPLANATION.glob("*.md")) + sorted(DECISIONS.glob("*.md"))


@pytest.mark.parametrize("page", pages(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_page_names_only_files_functions_and_sql_that_exist(page: Path) -> None:
    assert stale_names(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", pages(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_page_links_only_to_pages_and_headings_that_exist(page: Path) -> None:
    assert broken_links(page) == []


def test_the_explanation_stays_within_its_budget() -> None:
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in EXPLANATION.glob("*.md"))
    assert lines <= EXPLANATION_BUDGET, f"docs/explanation/ has {lines} lines, over {EXPLANATION_BUDGET}"


def test_every_decision_record_is_dated_and_listed_in_the_index() -> None:
    index = (DECISIONS / "index.md").read_text(encoding="utf-8")
    records = [p for p in DECISIONS.glob("*.md") if p.name != "index.md"]
    assert records
    for record in records:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", record.name), record.name
        assert f"({record.name})" in index, f"{record.name} is not in docs/decisions/index.md"


def test_the_checker_reports_what_does_not_exist() -> None:
    text = (
        "`calls.statement`, `calls._run`, `Worker._claim`, `Worker._no_such`, `Poll.alarm`, "
        "`worker.claim`, `worker.no_such_block`, `wfctl/worker/calls.py`, `wfctl/worker/nope.py`, "
        "`wfctl_step_begin`, `wfctl_no_such_function`, `wfctl.toml`, `Claimed.parked_name`"
    )
    assert stale_names(text) == [
        "calls.statement",
        "Worker._no_such",
        "worker.no_such_block",
        "wfctl/worker/nope.py",
        "wfctl_no_such_function",
    ]


def test_a_heading_anchor_is_the_one_mkdocs_makes() -> None:
    assert slug("No lost wake-up") == "no-lost-wake-up"
    assert slug("Who writes `workflow_limits`") == "who-writes-workflow_limits"
    assert slug("Downtime, edits, time zones") == "downtime-edits-time-zones"
