"""A closed SQL catalogue: every named block of ``sql/queries/*.sql`` is run
by the package, and every block the code asks for exists. Also: the workflow status words are
spelled in one place in Python, wfctl.words.

The names the code asks for are found statically with ``ast``: the first argument of every
``q(...)`` and ``composed(...)`` call (both arguments of ``spliced(...)``) in wfctl/, bench/
and tests/, followed back to string literals: a literal, either branch of ``a if c else b``,
the values assigned to a name (in the function, else in the module), the items of the tuple a
``for`` loop walks, and, for a parameter of the enclosing function, the argument every call of
that function in the same file passes there (``reports._rows(conn, "reports.stuck", ...)``),
or the column of its ``pytest.mark.parametrize`` table; an attribute ``<description>.block``,
to the ``block=`` literals of every ``Operation(...)`` of the same files (wfctl/operations.py
describes each coordination step, its block among the rest) and the ``block = "..."`` of every
class body there (wfctl/coordination.py's waits name the block that reads them so). An argument that cannot be
followed fails the test: the catalogue is closed only while every name is visible.

A block counts as used when the package asks for it. One that only the tests or the benchmark
ask for must be listed in OUTSIDE_THE_PACKAGE with the reason it is kept.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from helpers import HERE

from wfctl import words
from wfctl.queries import all_queries, sql_root

ROOT = HERE.parent
PACKAGE = ROOT / "wfctl"
OTHERS = (ROOT / "bench", ROOT / "tests")
#: wfctl.queries: a block by name, one with identifiers, or one with another spliced in (both
#: arguments are block names); the same as numbered statements for a RawCursor
QUERY_FUNCTIONS = {"q": 1, "composed": 1, "spliced": 2, "numbered": 1, "numbered_spliced": 2}
LOADER = PACKAGE / "queries.py"  # defines them: composed and spliced pass their caller's names on
#: wfctl.operations: ``Operation(..., block="worker.recv")``, run as ``q(<description>.block)``;
#: wfctl.coordination: ``class ResultWait(Wait): block = "coordination.outcome"``, the same way
DESCRIPTION, DESCRIBED_FIELD = "Operation", "block"

#: Blocks the package does not run, kept for the tests or the benchmark, and why.
OUTSIDE_THE_PACKAGE = {
    "admin.create_database_from": (
        "tests/conftest.py copies each test's database from a template migrated once per run"
    ),
}

Files = dict[str, str]  # path (for messages) -> source


class Unfollowable(Exception):
    """A query name the static analysis cannot trace to string literals."""


# -- the analysis -------------------------------------------------------------------------------


class _Module:
    def __init__(self, source: str, filename: str, described: frozenset[str] = frozenset()) -> None:
        self.filename = filename
        self.described = described  # the block= literals of the Operation(...) descriptions
        self.tree = ast.parse(source, filename)
        self.scope: dict[ast.AST, ast.AST] = {}  # node -> enclosing function, or the module
        self._visit(self.tree, self.tree)

    def _visit(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.scope[child] = scope
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            self._visit(child, inner)

    def calls(self) -> Iterator[ast.Call]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield node

    def where(self, node: ast.AST) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', '?')}"


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _names(module: _Module, node: ast.expr, scope: ast.AST, depth: int = 0) -> set[str]:
    """The string values ``node`` can have, or Unfollowable."""
    if depth > 10:
        raise Unfollowable(f"{ast.unparse(node)!r} (too many steps)")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _names(module, node.body, scope, depth + 1) | _names(module, node.orelse, scope, depth + 1)
    if isinstance(node, ast.Name):
        return _name_values(module, node.id, scope, depth + 1, lambda v, s: _names(module, v, s, depth + 1))
    if isinstance(node, ast.Attribute) and node.attr == DESCRIBED_FIELD and module.described:
        return set(module.described)
    raise Unfollowable(repr(ast.unparse(node)))


def described_blocks(files: Files) -> frozenset[str]:
    """The ``block=`` literals of every ``Operation(...)`` call in ``files``, and the ``block``
    literals that class bodies assign."""
    found: set[str] = set()
    for filename, source in files.items():
        module = _Module(source, filename)
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                found |= _class_blocks(node, filename)
        for call in module.calls():
            if _called_name(call) != DESCRIPTION:
                continue
            for keyword in call.keywords:
                if keyword.arg == DESCRIBED_FIELD:
                    if not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)):
                        raise AssertionError(f"{filename}: {DESCRIPTION}(block=...) must be a literal")
                    found.add(keyword.value.value)
    return frozenset(found)


def _class_blocks(node: ast.ClassDef, filename: str) -> set[str]:
    """What the body of class ``node`` assigns to ``block`` (a literal, or the test fails)."""
    found: set[str] = set()
    for statement in node.body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == DESCRIBED_FIELD for t in targets):
            if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                raise AssertionError(f"{filename}: class {node.name}: {DESCRIBED_FIELD} must be a literal")
            found.add(value.value)
    return found


def _items(module: _Module, node: ast.expr, scope: ast.AST, depth: int) -> set[str]:
    """The string values of the items of the tuple, list or set ``node``."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        out: set[str] = set()
        for item in node.elts:
            out |= _names(module, item, scope, depth + 1)
        return out
    if isinstance(node, ast.Name):
        return _name_values(module, node.id, scope, depth + 1, lambda v, s: _items(module, v, s, depth + 1))
    raise Unfollowable(f"a loop over {ast.unparse(node)!r}")


Follow = Callable[[ast.expr, ast.AST], set[str]]


def _name_values(module: _Module, name: str, scope: ast.AST, depth: int, follow: Follow) -> set[str]:
    """Follow ``name`` in ``scope``: its assignments, the loops that bind it, the arguments
    passed to it as a parameter; then the module's assignments."""
    for where in (scope, module.tree) if scope is not module.tree else (module.tree,):
        values: set[str] = set()
        bound = False
        for node in ast.walk(where):
            if where is module.tree and module.scope.get(node) is not module.tree:
                continue  # in the module, only module-level statements
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                values |= follow(node.value, where)
                bound = True
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.target.id == name and node.value is not None:
                    values |= follow(node.value, where)
                    bound = True
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == name:
                values |= _items(module, node.iter, where, depth + 1)
                bound = True
        if bound:
            return values
        if isinstance(where, ast.FunctionDef | ast.AsyncFunctionDef) and name in _parameters(where):
            return _arguments(module, where, name, depth + 1)
    raise Unfollowable(f"the name {name!r}")


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def _arguments(
    module: _Module, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, depth: int
) -> set[str]:
    """What the callers of ``function`` in the same file pass as its parameter ``name``; for a
    test function, the column ``name`` of its parametrize table."""
    table = _parametrized(module, function, name, depth)
    if table is not None:
        return table
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    values: set[str] = set()
    calls = [c for c in module.calls() if _called_name(c) == function.name]
    if not calls:
        raise Unfollowable(f"the parameter {name!r} of {function.name}(), which nothing here calls")
    for call in calls:
        index = positional.index(name) if name in positional else None
        if (
            index is not None
            and isinstance(call.func, ast.Attribute)
            and positional[:1] in (["self"], ["cls"])
        ):
            index -= 1
        given = next((k.value for k in call.keywords if k.arg == name), None)
        if given is None and index is not None and index < len(call.args):
            given = call.args[index]
        if given is None or any(isinstance(a, ast.Starred) for a in call.args):
            raise Unfollowable(f"the parameter {name!r} of {function.name}() at {module.where(call)}")
        values |= _names(module, given, module.scope[call], depth + 1)
    return values


def _parametrized(
    module: _Module, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, depth: int
) -> set[str] | None:
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and _called_name(decorator) == "parametrize"):
            continue
        if len(decorator.args) < 2:
            continue
        head, table = decorator.args[0], decorator.args[1]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            columns = [c.strip() for c in head.value.split(",")]
        elif isinstance(head, ast.Tuple | ast.List):
            columns = [c.value for c in head.elts if isinstance(c, ast.Constant)]
        else:
            continue
        if name not in columns:
            continue
        if not isinstance(table, ast.List | ast.Tuple):
            raise Unfollowable(f"the parametrize table of {function.name}()")
        index = columns.index(name)
        values: set[str] = set()
        for row in table.elts:
            cell = row.elts[index] if len(columns) > 1 and isinstance(row, ast.Tuple | ast.List) else row
            values |= _names(module, cell, module.tree, depth + 1)
        return values
    return None


def asked_for(
    files: Files, described: frozenset[str] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """{block name: [where it is asked for]} over ``files``, and what could not be followed.
    ``described``: the blocks of the operation descriptions (by default, those in ``files``;
    the tests read the package's)."""
    names: dict[str, list[str]] = {}
    unfollowable: list[str] = []
    if described is None:
        described = described_blocks(files)
    for filename, source in files.items():
        module = _Module(source, filename, described)
        for call in module.calls():
            count = QUERY_FUNCTIONS.get(_called_name(call) or "")
            if count is None:
                continue
            for index in range(count):
                argument = call.args[index] if len(call.args) > index else None
                try:
                    if argument is None or isinstance(argument, ast.Starred):
                        raise Unfollowable("no block name")
                    found = _names(module, argument, module.scope[call])
                except Unfollowable as exc:
                    unfollowable.append(
                        f"{module.where(call)}: cannot tell which block {ast.unparse(call)} runs: {exc}"
                    )
                    continue
                for name in found:
                    names.setdefault(name, []).append(module.where(call))
    return names, unfollowable


def catalogue_problems(
    blocks: Iterable[str], package: Files, others: Files, outside: dict[str, str] = OUTSIDE_THE_PACKAGE
) -> list[str]:
    """Everything that keeps the catalogue from being closed."""
    blocks = set(blocks)
    used, problems = asked_for(package)
    elsewhere, unfollowable = asked_for(others, described_blocks({**package, **others}))
    problems += unfollowable
    for name, where in sorted({**elsewhere, **used}.items()):
        if name not in blocks:
            problems.append(f"{where[0]}: asks for {name!r}, which no file of sql/queries/ defines")
    for name in sorted(blocks - set(used)):
        if name not in outside:
            who = f" (only {', '.join(elsewhere[name])} asks for it)" if name in elsewhere else ""
            problems.append(f"the block {name!r} is not used by the package{who}: remove it")
        elif name not in elsewhere:
            problems.append(f"the block {name!r} is listed as kept for the tests, which no longer use it")
    for name in sorted(set(outside) & set(used)):
        problems.append(f"the block {name!r} is listed as kept for the tests, but the package uses it")
    return problems


def sources(*roots: Path) -> Files:
    out: Files = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path != LOADER:
                out[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return out


# -- the checker on planted faults first --------------------------------------------------------

PLANTED_BLOCKS = {"worker.claim", "reports.stuck", "reports.workers", "admin.create_database_from"}
PLANTED_PACKAGE = {
    "wfctl/a.py": 'def f(conn):\n    conn.execute(q("worker.claim"))\n',
    "wfctl/b.py": (
        "def _rows(conn, name, params=None):\n    return conn.execute(q(name), params)\n\n"
        'def g(conn):\n    return _rows(conn, "reports.stuck"), _rows(conn, name="reports.workers")\n'
    ),
}
PLANTED_TESTS = {
    "tests/conftest.py": (
        'def copy(conn, x):\n    conn.execute(composed("admin.create_database_from", name=x, template=x))\n'
    )
}


def test_the_checker_passes_a_closed_catalogue():
    assert catalogue_problems(PLANTED_BLOCKS, PLANTED_PACKAGE, PLANTED_TESTS) == []


def test_the_checker_finds_an_unused_block():
    problems = catalogue_problems(PLANTED_BLOCKS | {"worker.whereabouts"}, PLANTED_PACKAGE, PLANTED_TESTS)
    assert problems == ["the block 'worker.whereabouts' is not used by the package: remove it"]


def test_the_checker_finds_a_block_only_the_tests_use():
    tests = {**PLANTED_TESTS, "tests/test_x.py": 'def test(conn):\n    conn.execute(q("demo.summary"))\n'}
    problems = catalogue_problems(PLANTED_BLOCKS | {"demo.summary"}, PLANTED_PACKAGE, tests)
    assert problems == [
        "the block 'demo.summary' is not used by the package (only tests/test_x.py:2 asks for it): remove it"
    ]


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ('def h(conn):\n    conn.execute(q("worker.no_such_block"))\n', "asks for 'worker.no_such_block'"),
        ('def h(conn):\n    conn.execute(composed("nosuchfile.x", name="n"))\n', "asks for 'nosuchfile.x'"),
        (
            'def h(conn, dry):\n    conn.execute(q("worker.claim" if dry else "worker.clam"))\n',
            "'worker.clam'",
        ),
        ('def h(conn):\n    return _rows(conn, "reports.stuk")\n', "asks for 'reports.stuk'"),
        (
            'NAMES = ("reports.stuck", "reports.slo")\ndef h(conn):\n    for n in NAMES:\n        q(n)\n',
            "'reports.slo'",
        ),
    ],
)
def test_the_checker_finds_a_missing_name(planted, expected):
    package = {**PLANTED_PACKAGE, "wfctl/b.py": PLANTED_PACKAGE["wfctl/b.py"] + "\n\n" + planted}
    problems = catalogue_problems(PLANTED_BLOCKS, package, PLANTED_TESTS)
    assert len(problems) == 1 and expected in problems[0] and "wfctl/b.py:" in problems[0], problems


def test_the_checker_finds_a_missing_name_in_a_parametrized_test():
    tests = {
        **PLANTED_TESTS,
        "tests/test_y.py": (
            "def plan(conn, name):\n    return q(name)\n\n"
            '@pytest.mark.parametrize(("name", "n"), [("reports.stuck", 1), ("reports.gone", 2)])\n'
            "def test_plan(conn, name, n):\n    plan(conn, name)\n"
        ),
    }
    problems = catalogue_problems(PLANTED_BLOCKS, PLANTED_PACKAGE, tests)
    assert problems == ["tests/test_y.py:2: asks for 'reports.gone', which no file of sql/queries/ defines"]


DESCRIBED = {
    "wfctl/ops.py": (
        'OPS = {"r": Operation("r", block="worker.recv"), "s": Operation("s", block="worker.set_event")}\n'
        "def run(conn, op):\n    return conn.execute(q(OPS[op].block))\n"
    )
}


def test_the_checker_follows_the_blocks_of_the_operation_descriptions():
    package = {**PLANTED_PACKAGE, **DESCRIBED}
    blocks = PLANTED_BLOCKS | {"worker.recv", "worker.set_event"}
    assert catalogue_problems(blocks, package, PLANTED_TESTS) == []
    unused = catalogue_problems(blocks | {"worker.join"}, package, PLANTED_TESTS)
    assert unused == ["the block 'worker.join' is not used by the package: remove it"]
    missing = catalogue_problems(blocks - {"worker.recv"}, package, PLANTED_TESTS)
    assert len(missing) == 1 and "asks for 'worker.recv'" in missing[0], missing


WAITS = {
    "wfctl/waits.py": (
        'class Wait:\n    block: str\n\nclass Stuck(Wait):\n    block = "reports.stuck"\n\n'
        'class Slow(Wait):\n    block: str = "reports.slow"\n\n'
        "def read(conn, wait):\n    return conn.execute(q(wait.block))\n"
    )
}


def test_the_checker_follows_the_blocks_that_classes_name():
    package = {**PLANTED_PACKAGE, **WAITS}
    blocks = PLANTED_BLOCKS | {"reports.slow"}
    assert catalogue_problems(blocks, package, PLANTED_TESTS) == []
    missing = catalogue_problems(PLANTED_BLOCKS, package, PLANTED_TESTS)
    assert len(missing) == 1 and "asks for 'reports.slow'" in missing[0], missing
    computed = {"wfctl/w.py": 'class W:\n    block = "reports." + "stuck"\n'}
    with pytest.raises(AssertionError, match="class W: block must be a literal"):
        catalogue_problems(PLANTED_BLOCKS, {**PLANTED_PACKAGE, **computed}, PLANTED_TESTS)


@pytest.mark.parametrize(
    "planted",
    [
        "def h(conn, make):\n    conn.execute(q(make()))\n",
        'def h(conn, kind):\n    conn.execute(q(f"worker.{kind}"))\n',
        "def h(conn, name):\n    conn.execute(q(name))\n",  # nothing calls h
        "def h(conn, *names):\n    conn.execute(q(*names))\n",
        "def h(conn, op):\n    conn.execute(q(op.block))\n",  # no Operation(block=...) anywhere
    ],
)
def test_the_checker_refuses_a_name_it_cannot_follow(planted):
    package = {**PLANTED_PACKAGE, "wfctl/c.py": planted}
    problems = catalogue_problems(PLANTED_BLOCKS, package, PLANTED_TESTS)
    assert len(problems) == 1 and "cannot tell which block" in problems[0], problems


def test_the_checker_finds_a_stale_exception():
    problems = catalogue_problems(PLANTED_BLOCKS, PLANTED_PACKAGE, {})
    assert problems == [
        "the block 'admin.create_database_from' is listed as kept for the tests, which no longer use it"
    ]


# -- the catalogue ------------------------------------------------------------------------------


def test_every_block_is_used_and_every_name_exists():
    package, others = sources(PACKAGE), sources(*OTHERS)
    assert len(package) > 20 and any("reports.py" in p for p in package)
    used, _ = asked_for(package)
    assert len(used) > 40  # the scan sees the package's queries
    problems = catalogue_problems(all_queries(), package, others)
    assert not problems, "\n".join(problems)


def test_the_files_hold_blocks_only():
    """Nothing before a file's first block but comments: a statement there would be in no block."""
    for path in sorted((sql_root() / "queries").glob("*.sql")):
        head = path.read_text(encoding="utf-8").split("-- name:", 1)[0]
        stray = [line for line in head.splitlines() if line.strip() and not line.lstrip().startswith("--")]
        assert not stray, f"{path.name}: SQL outside any named block: {stray}"


# -- status words -------------------------------------------------------------------------------

STATUS_WORDS = set(words.STATUSES)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _status_literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in STATUS_WORDS:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in STATUS_WORDS]
    return []


def status_word_problems(source: str, filename: str = "<snippet>") -> list[str]:
    """Status words spelled outside wfctl.words: a status compared with a literal, a collection
    of status words only, or a string listing all of them. (A log event or an outcome named
    "completed" is not a status: compared with something not called status, it passes.)"""
    tree = ast.parse(source, filename)
    docs = _docstrings(tree)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = [w for side in sides for w in _status_literals(side)]
            if literals and any("status" in ast.unparse(s) for s in sides if not _status_literals(s)):
                problems.append(
                    f"{filename}:{node.lineno}: a status compared with {literals}: use wfctl.words"
                )
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) > 1:
            if len(_status_literals(node)) == len(node.elts):
                problems.append(f"{filename}:{node.lineno}: status words spelled out: use wfctl.words")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and set(re.findall(r"[a-z]+", node.value)) >= STATUS_WORDS
        ):
            problems.append(f"{filename}:{node.lineno}: every status word in a string: use wfctl.words")
    return problems


BAD_STATUS_SNIPPETS = {
    "subscript": 'if r["status"] == "running":\n    pass',
    "attribute": 'x = done.previous_status != "pending"',
    "in-tuple": 'if status not in ("failed", "cancelled"):\n    pass',
    "collection": 'FINISHED = ("completed", "failed", "cancelled")',
    "all-in-a-string": 'WORDS = "pending running completed failed cancelled"',
}
GOOD_STATUS_SNIPPETS = {
    "constant": 'if r["status"] == RUNNING:\n    pass',
    "outcome": 'if self.outcome in ("completed", "parked", "released", "failed"):\n    pass',
    "event": 'log.event("failed", text)',
    "column": 'row = (r["completed"], r["failed"])',
    "docstring": 'def f():\n    """pending, running, completed, failed or cancelled."""',
}


@pytest.mark.parametrize("name", sorted(BAD_STATUS_SNIPPETS))
def test_the_status_checker_catches(name):
    assert status_word_problems(BAD_STATUS_SNIPPETS[name])


@pytest.mark.parametrize("name", sorted(GOOD_STATUS_SNIPPETS))
def test_the_status_checker_accepts(name):
    assert status_word_problems(GOOD_STATUS_SNIPPETS[name]) == []


def test_status_words_come_from_wfctl_words():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != PACKAGE / "words.py":
            problems += status_word_problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_status_words_match_the_schema():
    """wfctl.words.STATUSES is what the workflows.status CHECK constraint allows, in its order."""
    migration = (sql_root() / "migrations" / "0001_initial.sql").read_text(encoding="utf-8")
    match = re.search(r"workflows_status_check\s+CHECK \(status IN \(([^)]*)\)\)", migration)
    assert match is not None
    assert tuple(re.findall(r"'([a-z]+)'", match.group(1))) == words.STATUSES
