"""CONTRIBUTING.md stays true: its set-up commands are the README's, its commands that regenerate
files are the ones the tests ask for, the test knobs it names are the ones the tests read, and the
files it links exist."""

from __future__ import annotations

import ast
import re

import pytest
from helpers import REPO

from wfctl.cli import completion, docgen

GUIDE = REPO / "CONTRIBUTING.md"
pytestmark = pytest.mark.skipif(not GUIDE.exists(), reason="needs the source tree")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def test_the_set_up_commands_are_the_readmes():
    readme = shell_blocks((REPO / "README.md").read_text(encoding="utf-8"))[:2]
    assert shell_blocks(GUIDE.read_text(encoding="utf-8"))[:2] == readme


def test_the_regenerate_commands_are_what_the_tests_ask_for():
    guide = GUIDE.read_text(encoding="utf-8")
    assert docgen.REGENERATE in guide
    for shell, name in completion.FILENAMES.items():
        assert f"wfctl completion {shell} > completions/{name}" in guide


def test_the_stateful_knobs_are_the_ones_the_test_reads():
    guide = GUIDE.read_text(encoding="utf-8")
    model = ast.parse((REPO / "tests" / "process" / "test_stateful.py").read_text(encoding="utf-8"))
    read = {
        node.value.value
        for node in model.body
        if isinstance(node, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id.endswith("_ENV") for target in node.targets)
        and isinstance(node.value, ast.Constant)
        and str(node.value.value).startswith("WFCTL_STATEFUL_")
    }
    assert read, "the model reads no WFCTL_STATEFUL_ knob: this test lost track of it"
    assert set(re.findall(r"WFCTL_STATEFUL_[A-Z]+", guide)) == read


def test_the_tiers_table_names_every_tier():
    guide = GUIDE.read_text(encoding="utf-8")
    listed = re.findall(r"^\| `tests/(\w+)` \|", guide, flags=re.MULTILINE)
    on_disk = sorted({p.parent.name for p in (REPO / "tests").glob("*/test_*.py")})
    assert sorted(listed) == on_disk, listed


def test_ci_runs_the_unit_and_database_tiers_in_each_layout():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    passes = re.findall(r"^(.*)pytest .*tests/unit tests/db$", ci, flags=re.MULTILINE)
    assert sorted(p.strip() for p in passes) == ["", "WFCTL_TEST_LAYOUT=partitioned"]


def test_the_modules_it_says_run_in_both_layouts_are_marked():
    guide = GUIDE.read_text(encoding="utf-8")
    section = guide.split("- **Layouts.**", 1)[1].split("- **", 1)[0]
    named = set(re.findall(r"`(test_\w+\.py)`", section))
    mark = re.compile(r"^pytestmark = .*pytest\.mark\.layouts", flags=re.MULTILINE)
    process = (REPO / "tests" / "process").glob("test_*.py")
    marked = {p.name for p in process if mark.search(p.read_text("utf-8"))}
    assert marked and named == marked


def test_the_markers_it_names_are_registered(pytestconfig):
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert {"slow", "alone", "layouts"} <= registered
    guide = GUIDE.read_text(encoding="utf-8")
    assert "`slow`" in guide and "`alone`" in guide


def test_its_links_lead_to_files():
    guide = GUIDE.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)\)", guide)
    assert targets
    assert [t for t in targets if not (REPO / t).exists()] == []
