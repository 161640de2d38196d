"""The suite's tiers hold what they promise, read from the test files' code (the tiers' conftest
files refuse the fixtures at run time; this finds what no fixture shows: a helper that starts a
process, a test module of another tier imported):

- tests/unit: no server and no process;
- tests/db: a server, no process (CI runs it on every server version and layout);
- tests/process: workers, signals, the embedded server, PgBouncer, failover, chaos, the model;
- tests/docs: what the README, the guides and the generated references say.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import HERE

TIERS = ("unit", "db", "process", "docs")
# Names that start a process (or are a fixture or helper that does), and names of the server.
PROCESS_NAMES = frozenset(
    {
        "workers",
        "Workers",
        "run_wfctl",
        "wfctl_process",
        "wfctl_command",
        "subprocess",
        "Popen",
        "servers",
        "chaos",
        "EmbeddedServer",
    }
)
SERVER_NAMES = frozenset({"pg_server", "dsn", "conn", "empty_dsn", "templates"})


def module_defs(tree: ast.Module) -> dict[str, ast.AST]:
    """The module's top-level names, each with the statement that binds it."""
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defs[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                defs.update({n.id: node for n in ast.walk(target) if isinstance(n, ast.Name)})
    return defs


def names_in(node: ast.AST) -> set[str]:
    """Every name a statement reads, binds as a parameter (a fixture) or imports."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.arg):
            found.add(sub.arg)
        elif isinstance(sub, ast.alias):
            found.add((sub.asname or sub.name).split(".")[0])
    return found


def needs(path: Path) -> dict[str, set[str]]:
    """For each test function of ``path``: the names it reaches through the module's own
    helpers and fixtures."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = module_defs(tree)
    reached: dict[str, set[str]] = {}
    for name, node in defs.items():
        if not (name.startswith("test_") and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)):
            continue
        seen: set[str] = set()
        used: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in defs:
                continue
            seen.add(current)
            names = names_in(defs[current])
            used |= names
            todo.extend(n for n in names if n in defs)
        reached[name] = used
    return reached


def tier_files(tier: str) -> list[Path]:
    return sorted((HERE / tier).glob("test_*.py"))


def test_every_test_file_is_in_a_tier():
    assert sorted(p.name for p in HERE.glob("test_*.py")) == []
    for tier in TIERS:
        assert tier_files(tier), f"tests/{tier} has no tests"


@pytest.mark.parametrize("tier", ["unit", "db"])
def test_unit_and_db_tests_start_no_process(tier):
    broken = {
        f"{path.name}::{test}": sorted(used & PROCESS_NAMES)
        for path in tier_files(tier)
        for test, used in needs(path).items()
        if used & PROCESS_NAMES
    }
    assert broken == {}, f"these start processes: move them to tests/process ({broken})"


def test_unit_tests_use_no_server():
    broken = {
        f"{path.name}::{test}": sorted(used & SERVER_NAMES)
        for path in tier_files("unit")
        for test, used in needs(path).items()
        if used & SERVER_NAMES
    }
    assert broken == {}, f"these use the server: move them to tests/db ({broken})"


def test_a_test_module_imports_test_modules_of_its_own_tier_only():
    """pytest puts a test file's own directory on sys.path: a tier run alone
    (``pytest tests/db``) cannot import another tier's module, and ``conftest`` names a different
    module depending on which tiers a run collects. Shared code is in tests/support and helpers."""
    broken = []
    for tier in TIERS:
        own = {p.stem for p in tier_files(tier)}
        for path in tier_files(tier):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                else:
                    continue
                foreign = [m for m in modules if (m.startswith("test_") and m not in own) or m == "conftest"]
                broken += [f"{tier}/{path.name}: {m}" for m in foreign]
    assert broken == []


def test_the_checker_sees_a_process_and_a_server(tmp_path):
    """The reading above finds a process behind a helper and a server behind a fixture."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import subprocess\n"
        "def helper():\n    subprocess.run(['true'])\n"
        "def test_indirect():\n    helper()\n"
        "def test_fixture(conn):\n    pass\n"
        "def test_plain():\n    assert 1\n"
    )
    reached = needs(sample)
    assert reached["test_indirect"] & PROCESS_NAMES == {"subprocess"}
    assert reached["test_fixture"] & SERVER_NAMES == {"conn"}
    assert not reached["test_plain"] & (PROCESS_NAMES | SERVER_NAMES)
