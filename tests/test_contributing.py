"""CONTRIBUTING.md stays true: its set-up commands are the README's, its commands that regenerate
files are the ones the tests ask for, the test knobs it names are the ones the tests read, and the
files it links exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_stateful

from wfctl.cli import completion, docgen

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "CONTRIBUTING.md"
pytestmark = pytest.mark.skipif(not GUIDE.exists(), reason="needs the source tree")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def test_the_set_up_commands_are_the_readmes():
    readme = shell_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[:2]
    assert shell_blocks(GUIDE.read_text(encoding="utf-8"))[:2] == readme


def test_the_regenerate_commands_are_what_the_tests_ask_for():
    guide = GUIDE.read_text(encoding="utf-8")
    assert docgen.REGENERATE in guide
    for shell, name in completion.FILENAMES.items():
        assert f"wfctl completion {shell} > completions/{name}" in guide


def test_the_stateful_knobs_are_the_ones_the_test_reads():
    guide = GUIDE.read_text(encoding="utf-8")
    read = {
        value
        for name, value in vars(test_stateful).items()
        if name.endswith("_ENV") and value.startswith("WFCTL_STATEFUL_")
    }
    assert set(re.findall(r"WFCTL_STATEFUL_[A-Z]+", guide)) == read


def test_the_partitioned_pass_lists_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_files = re.findall(r"tests/(test_\w+\.py)", ci.split("WFCTL_TEST_LAYOUT=partitioned pytest", 1)[1])
    guide = GUIDE.read_text(encoding="utf-8")
    section = guide.split("WFCTL_TEST_LAYOUT=partitioned", 1)[1].split("- **", 1)[0]
    assert sorted(re.findall(r"(test_\w+\.py)", section)) == sorted(ci_files)


def test_the_markers_it_names_are_registered(pytestconfig):
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert {"slow", "alone"} <= registered
    guide = GUIDE.read_text(encoding="utf-8")
    assert "`slow`" in guide and "`alone`" in guide


def test_its_links_lead_to_files():
    guide = GUIDE.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)\)", guide)
    assert targets
    assert [t for t in targets if not (ROOT / t).exists()] == []
