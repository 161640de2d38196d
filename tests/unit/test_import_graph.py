"""wfctl's modules import one another without circles, and nothing below the CLI imports it.
Arrows point down: ``wfctl.cli`` may import everything below it; only the
entry point ``python -m wfctl`` (``wfctl.__main__``) imports ``wfctl.cli``. What an application
imports (``wfctl``, ``wfctl.aio``) reaches neither the CLI nor what only the CLI needs (Typer,
Rich, Click): an asyncio service that imports ``wfctl.aio`` loads no command line.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``, at
module level and inside functions alike (a function-level import is there to load something
late, such as the embedded server's 900 lines only for the embedded target; it must not hide a
circle). ``from wfctl import jsonvalue`` is an arrow to ``wfctl.jsonvalue``; ``from wfctl
import __version__`` one to the package ``wfctl`` (its ``__init__``). The implicit import of a
module's parent packages is not an arrow: every module has it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import HERE

PACKAGE = HERE.parent / "wfctl"
CLI = "wfctl.cli"
ENTRY_POINTS = {"wfctl.__main__"}  # may import the CLI: they are above it
LIBRARY = ("wfctl", "wfctl.aio")  # what applications import
CLI_PACKAGES = frozenset({"typer", "rich", "click", "textual"})  # what only the CLI may import


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` imports anywhere in ``source``."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    names = set(paths)
    return {
        name: imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", names)
        for name, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle for every group of modules that reach one another (Tarjan's strongly connected
    components), as a path that comes back to where it starts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth: at most the number of modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_circle(graph, component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, within the component."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & component):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError("a strongly connected component without a circle")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    def in_cli(name: str) -> bool:
        return name == CLI or name.startswith(CLI + ".")

    return sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if not in_cli(name) and name not in ENTRY_POINTS
        for target in targets
        if in_cli(target)
    )


def third_party(source: str) -> set[str]:
    """The top-level packages outside wfctl that ``source`` imports anywhere (absolute imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"wfctl"}


def reached(graph: dict[str, set[str]], start: str, seen: set[str] | None = None) -> set[str]:
    """``start`` and every module importing it loads: what it imports, and so on, with the
    parent packages of each (importing ``wfctl.aio`` runs ``wfctl/__init__.py`` first).
    Recursion depth: at most the number of modules."""
    seen = set() if seen is None else seen
    if start in graph and start not in seen:
        seen.add(start)
        parts = start.split(".")
        for name in [*(".".join(parts[:n]) for n in range(1, len(parts))), *sorted(graph[start])]:
            reached(graph, name, seen)
    return seen


def cli_reached_from(start: str, root: Path = PACKAGE) -> list[str]:
    """How importing ``start`` would load the CLI or a package only the CLI needs."""
    found = []
    for name in sorted(reached(import_graph(root), start)):
        if name == CLI or name.startswith(CLI + "."):
            found.append(f"{start} reaches {name}")
        path = root.parent.joinpath(*name.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        packages = third_party(source.read_text(encoding="utf-8")) & CLI_PACKAGES
        found.extend(f"{name} imports {package}" for package in sorted(packages))
    return found


# -- the checker on small packages first: one that cannot fail does not pass -------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "wfctl"
    for relative, source in {"__init__.py": "", "cli/__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return package


PLANTED = {
    "module-level": {"a.py": "from wfctl import b\n", "b.py": "import wfctl.a\n"},
    "function-level": {
        "a.py": "from wfctl.b import thing\n",
        "b.py": "thing = 1\n\ndef f():\n    from wfctl.a import g\n",
    },
    "through-three": {
        "a.py": "from wfctl.b import x\n",
        "b.py": "from wfctl.c import y\n",
        "c.py": "def f():\n    from wfctl.a import z\n",
    },
    "relative": {"cli/app.py": "from . import completion\n", "cli/completion.py": "from .app import app\n"},
    "through-the-package": {
        "__init__.py": "from wfctl.a import f\n",
        "a.py": "from wfctl import __version__\n",
    },
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_checker_finds_a_planted_circle(tmp_path, name):
    found = cycles(import_graph(write_package(tmp_path, PLANTED[name])))
    assert len(found) == 1 and found[0][0] == found[0][-1], found


def test_the_checker_accepts_arrows_that_point_down(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "from wfctl.a import f\n",
            "a.py": "from wfctl import b\n\ndef f():\n    from wfctl.c import g\n",
            "b.py": "import os\nfrom wfctl.c import g\n",
            "c.py": "def g():\n    pass\n",
            "cli/app.py": "from wfctl import __version__\nfrom wfctl.cli import run\n",
            "cli/run.py": "from wfctl.a import f\nfrom wfctl import b\n",
        },
    )
    graph = import_graph(package)
    assert graph["wfctl.cli.app"] == {"wfctl", "wfctl.cli.run"}
    assert graph["wfctl.a"] == {"wfctl.b", "wfctl.c"}
    assert cycles(graph) == []
    assert upward_imports(graph) == []


def test_the_checker_finds_an_import_of_the_cli(tmp_path):
    package = write_package(
        tmp_path,
        {"a.py": "def f():\n    from wfctl.cli.render import line\n", "cli/render.py": "line = print\n"},
    )
    assert upward_imports(import_graph(package)) == ["wfctl.a imports wfctl.cli.render"]


CLI_REACHED = {
    "a function's import of Rich, two arrows away": (
        "wfctl.a",
        {"a.py": "from wfctl import b\n", "b.py": "def f():\n    import rich.console\n"},
        ["wfctl.b imports rich"],
    ),
    "the CLI": (
        "wfctl.a",
        {"a.py": "from wfctl.cli.render import line\n", "cli/render.py": "import typer\n"},
        ["wfctl.a reaches wfctl.cli", "wfctl.a reaches wfctl.cli.render", "wfctl.cli.render imports typer"],
    ),
    "the parent package": (
        "wfctl.sub.a",
        {"sub/__init__.py": "from typer import Typer\n", "sub/a.py": "import os\n"},
        ["wfctl.sub imports typer"],
    ),
}


@pytest.mark.parametrize("name", sorted(CLI_REACHED))
def test_the_checker_finds_the_cli_reached_from_the_library(tmp_path, name):
    start, files, expected = CLI_REACHED[name]
    assert cli_reached_from(start, write_package(tmp_path, files)) == expected


def test_the_checker_accepts_a_library_that_leaves_the_cli_alone(tmp_path):
    package = write_package(
        tmp_path,
        {
            "a.py": "import asyncio\nimport psycopg\nfrom wfctl import b\n",
            "b.py": "from psycopg import sql\nfrom . import c\n",
            "c.py": "import json\n",
            "cli/app.py": "import typer\nfrom rich.console import Console\nfrom wfctl import a\n",
        },
    )
    assert cli_reached_from("wfctl.a", package) == []
    assert "wfctl.cli.app imports typer" in cli_reached_from("wfctl.cli.app", package)


# -- the package -------------------------------------------------------------------------------


def test_the_graph_covers_the_package():
    graph = import_graph()
    assert {"wfctl", "wfctl.config", "wfctl.connection", "wfctl.cli.app", "wfctl.cli.completion"} <= set(
        graph
    )
    assert "wfctl.connection" in graph["wfctl.config"]  # the arrow that stays, pointing down
    assert "wfctl.cli.completion" in graph["wfctl.cli.app"]


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_nothing_below_the_cli_imports_it():
    assert upward_imports(import_graph()) == []


@pytest.mark.parametrize("start", LIBRARY)
def test_the_library_loads_no_command_line(start):
    assert "wfctl.aio" in import_graph()
    assert cli_reached_from(start) == []
