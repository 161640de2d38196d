"""Security: no string-formatted SQL in the package, and no password in any message,
log line or --json output; a wfctl.toml holding a password is private, and a readable one is
warned about.

(a) is a static check over wfctl/**/*.py with the ``ast`` module; it is run on small bad and
good snippets first, so that a checker that cannot fail does not pass. (b) runs commands and a
worker with a DSN that carries a password, against a role that really needs it (TCP,
scram-sha-256), and looks for the password in everything they print.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from helpers import HERE, free_port
from support.security import PASSWORD, no_password, write_config

from wfctl.cli.db import HIDDEN_NOTICE

PACKAGE = HERE.parent / "wfctl"


QUERY_METHODS = {"execute", "executemany", "copy", "stream"}


SAFE_CALLS = {"q", "composed", "spliced"}  # wfctl.queries: a named block from sql/, one composed


# with identifiers, or one with another named block spliced in
#: wfctl.queries: the same blocks as Numbered statements, whose ``.text`` a RawCursor runs
NUMBERED_CALLS = {"numbered", "numbered_spliced"}
SQL_OBJECTS = {"SQL", "Identifier", "Literal", "Placeholder", "Composed"}  # psycopg.sql


SQL_LITERAL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\b[\s\S]*\bSET\b|\bDELETE\s+FROM\b"
    r"|\b(CREATE|DROP|ALTER)\s+(TABLE|INDEX|FUNCTION|DATABASE|ROLE)\s+\w"
)


def _is_psycopg_sql(node: ast.expr) -> bool:
    """``sql.SQL(<constant or q()>)``, ``sql.Identifier(...)`` and the like, and ``.format``
    / ``.join`` of such an object."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("format", "join"):
        return _is_psycopg_sql(func.value)
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in SQL_OBJECTS


def _assignments(scope: ast.AST, name: str) -> list[ast.expr]:
    values: list[ast.expr] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                values.append(node.value)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            values.append(node.value)
    return values


Check = Callable[[ast.expr, ast.AST, int, ast.AST | None], str | None]


def _followed(
    node: ast.expr, scope: ast.AST, depth: int, module: ast.AST | None, check: Check, what: str
) -> str | None:
    """``check``'s verdict on ``node``, through conditional expressions and names: a name is
    followed to its assignments in the enclosing function, else in the module (``what`` says
    what a name that cannot be followed stands for)."""
    if isinstance(node, ast.IfExp):
        return _followed(node.body, scope, depth, module, check, what) or _followed(
            node.orelse, scope, depth, module, check, what
        )
    if isinstance(node, ast.Name):
        values = _assignments(scope, node.id) or (_assignments(module, node.id) if module else [])
        if not values or depth > 5:
            return f"{what}{node.id!r}, whose value cannot be checked here"
        for value in values:
            problem = _followed(value, scope, depth + 1, module, check, what)
            if problem:
                return f"{node.id!r}, {problem}"
        return None
    return check(node, scope, depth, module)


def _query_problem(
    node: ast.expr, scope: ast.AST, depth: int = 0, module: ast.AST | None = None
) -> str | None:
    """None when ``node`` is an acceptable query argument, else what is wrong with it."""
    return _followed(node, scope, depth, module, _query_value_problem, "the name ")


def _query_value_problem(node: ast.expr, scope: ast.AST, depth: int, module: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        return None
    if isinstance(node, ast.JoinedStr):
        return "an f-string"
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod):
            return "a %-formatted string"
        if isinstance(node.op, ast.Add):
            return "a concatenated string"
        return "an expression"
    if isinstance(node, ast.Attribute) and node.attr == "text":  # statement.text
        return _followed(node.value, scope, depth, module, _numbered_value_problem, "the text of ")
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in SAFE_CALLS:
            return None
        if _is_psycopg_sql(node):
            if isinstance(func, ast.Attribute) and func.attr in SQL_OBJECTS and node.args:
                return _query_problem(node.args[0], scope, depth, module)  # sql.SQL(<what?>)
            return None
        if isinstance(func, ast.Attribute) and func.attr == "encode" and not node.args:
            return _query_problem(func.value, scope, depth, module)  # q("...").encode()
        if isinstance(func, ast.Attribute) and func.attr == "sql" and not node.args:
            return None  # Migration.sql(): a file shipped in sql/migrations/
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return "a .format()ed string"
        if isinstance(func, ast.Attribute) and func.attr == "join":
            return "a joined string"
        return f"the result of {ast.unparse(func)}()"
    return f"an expression {ast.unparse(node)!r}"


def _numbered_value_problem(node: ast.expr, scope: ast.AST, depth: int, module: ast.AST | None) -> str | None:
    """None when ``node`` (whose ``.text`` is run) is a Numbered statement of a named block."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NUMBERED_CALLS:
        return None
    return f"the text of {ast.unparse(node)!r}, not a numbered block"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def sql_problems(source: str, filename: str = "<snippet>", *, allow_literals: bool = False) -> list[str]:
    """Every query built by string formatting in ``source``, and (unless ``allow_literals``)
    every string literal outside docstrings that looks like SQL."""
    tree = ast.parse(source, filename)
    problems: list[str] = []
    scopes: list[tuple[ast.AST, ast.AST]] = []  # (call, enclosing function or module)

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            if isinstance(child, ast.Call):
                scopes.append((child, scope))
            visit(child, inner)

    visit(tree, tree)
    for call, scope in scopes:
        assert isinstance(call, ast.Call)
        func = call.func
        argument: ast.expr | None = None
        if isinstance(func, ast.Attribute) and func.attr in QUERY_METHODS:
            argument = (
                call.args[0]
                if call.args
                else next((k.value for k in call.keywords if k.arg == "query"), None)
            )
        elif _is_psycopg_sql(call) and isinstance(func, ast.Attribute | ast.Name):
            name = func.attr if isinstance(func, ast.Attribute) else func.id
            if name == "SQL" and call.args:
                argument = call.args[0]
        if argument is None:
            continue
        problem = _query_problem(argument, scope, module=tree)
        if problem:
            problems.append(f"{filename}:{call.lineno}: query is {problem}: {ast.unparse(call)[:120]}")
    if not allow_literals:
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and SQL_LITERAL.search(node.value)
            ):
                problems.append(f"{filename}:{node.lineno}: SQL in a string literal: {node.value[:80]!r}")
    return problems


BAD_SNIPPETS = {
    "f-string": 'conn.execute(f"SELECT * FROM t WHERE id = {wid}")',
    "percent": 'conn.execute("SELECT * FROM t WHERE id = %s" % wid)',
    "format": 'conn.execute("SELECT * FROM t WHERE id = {}".format(wid))',
    "concatenation": 'conn.execute("SELECT * FROM t WHERE id = " + wid)',
    "q-plus-text": 'cur.executemany(q("worker.claim") + " LIMIT 1", rows)',
    "keyword": 'conn.execute(query=f"DELETE FROM t WHERE id = {wid}")',
    "sql-object-of-f-string": 'conn.execute(sql.SQL(f"DROP TABLE {name}"))',
    "bare-sql-object": 'sql.SQL("DROP TABLE " + name)',
    "through-a-name": 'def f(conn, wid):\n    text = f"UPDATE t SET a = {wid}"\n    conn.execute(text)',
    "unknown-name": "def f(conn, text):\n    conn.execute(text)",
    "module-constant": 'QUERY = "DELETE FROM t WHERE id = " + x\ndef f(conn):\n    conn.execute(QUERY)',
    "join": 'conn.execute(" ".join(parts))',
    "str-call": "conn.execute(str(thing))",
    "copy": 'cur.copy(f"COPY {table} FROM STDIN")',
    "literal": "MESSAGE = \"SELECT id FROM workflows WHERE status = 'running'\"",
    "literal-insert": 'x = ("INSERT INTO workflows (workflow_type) VALUES (%s)", 1)',
    "text-of-anything": "def f(cur, thing):\n    cur.execute(thing.text, [])",
    "text-of-a-call": "def f(cur, make):\n    statement = make()\n    cur.execute(statement.text, [])",
}


GOOD_SNIPPETS = {
    "named-block": 'conn.execute(q("worker.claim"), {"limit": 5})',
    "composed": 'conn.execute(composed("admin.create_database", name=name))',
    "sql-format": 'conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))',
    "encoded-block": 'conn.execute(q("schema.lock").encode())',
    "migration-file": "conn.execute(migration.sql().encode())",
    "through-a-name": 'def f(conn, dry):\n    name = "a.b" if dry else "a.c"\n    conn.execute(q(name))',
    "constant": 'conn.execute("SELECT 1")',
    "module-block": 'CLAIM = q("worker.claim")\ndef f(conn):\n    conn.execute(CLAIM, {})',
    "docstring": 'def f():\n    """SELECT ... FROM workflows FOR UPDATE SKIP LOCKED, in a CTE."""',
    "dict-copy": "d = other.copy()",
    "numbered-block": (
        'def f(cur, p):\n    s = numbered("worker.flush", workflows="w")\n    cur.execute(s.text, s.args(p))'
    ),
    "numbered-spliced": (
        "def f(cur, a):\n"
        '    s = numbered_spliced("worker.claim", "worker.claim_pruned") if a else numbered("worker.claim")\n'
        "    cur.execute(s.text, [])"
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_SNIPPETS))
def test_the_checker_catches(name):
    assert sql_problems(BAD_SNIPPETS[name]), f"the checker missed {BAD_SNIPPETS[name]!r}"


@pytest.mark.parametrize("name", sorted(GOOD_SNIPPETS))
def test_the_checker_accepts(name):
    assert sql_problems(GOOD_SNIPPETS[name]) == []


def package_files() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20 and (PACKAGE / "worker" / "runner.py") in files
    return files


def test_no_string_formatted_sql_in_the_package():
    problems = []
    for path in package_files():
        relative = path.relative_to(PACKAGE.parent)
        problems += sql_problems(
            path.read_text(encoding="utf-8"), str(relative), allow_literals=path.name == "queries.py"
        )
    assert not problems, "\n".join(problems)


def test_the_package_sends_queries_at_all():
    """The scan looks at something: the package does call .execute() on named blocks."""
    calls = 0
    for path in package_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                calls += node.func.attr in QUERY_METHODS
    assert calls >= 30


def url_form(dsn: str) -> str:
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"postgresql://{p['user']}:{p['password']}@{p['host']}:{p['port']}/{p['dbname']}"


def test_init_json_and_the_config_it_writes(cli, pw_dsn, clean_env, monkeypatch):
    old = os.umask(0)  # even a permissive umask must not widen the file
    try:
        result = cli("init", "--dsn", pw_dsn, "--json")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    no_password(result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert data["schema_version"] >= 1 and data["config_written"]
    config = Path(data["config_written"])
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert PASSWORD in config.read_text()  # it is kept, privately, for the next commands
    again = cli("--json", "db", "status")  # from the config file it wrote
    assert again.exit_code == 0, again.output
    no_password(again.stdout, again.stderr)
    status = json.loads(again.stdout)
    assert "password=***" in status["dsn"] and status["schema_version"] >= 1


def test_init_without_password_writes_a_readable_config(cli, dsn, clean_env):
    old = os.umask(0o077)
    try:
        result = cli("init", "--dsn", dsn)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE((clean_env / "wfctl.toml").stat().st_mode) == 0o644


@pytest.mark.parametrize("form", ["keyword", "url"])
def test_db_url_and_status_mask_the_password(cli, pw_dsn, form):
    dsn = pw_dsn if form == "keyword" else url_form(pw_dsn)
    assert cli("init", "--dsn", dsn).exit_code == 0
    url = cli("db", "url", "--dsn", dsn)
    assert url.exit_code == 0 and "password=***" in url.stdout
    status = cli("db", "status", "--json", "--dsn", dsn)
    assert status.exit_code == 0, status.output
    assert "***" in json.loads(status.stdout)["dsn"]
    table = cli("db", "status", "--dsn", dsn)
    assert table.exit_code == 0
    for r in (url, status, table):
        no_password(r.stdout, r.stderr)
    # what `db url` prints is usable (psql "$(wfctl db url)" asks for, or gets, the password)
    assert psycopg.conninfo.conninfo_to_dict(url.stdout.strip())["password"] == "***"


@pytest.mark.parametrize(
    "dsn",
    [
        "host=h port=1 password='se cret pass' dbname=d",
        "host=h port=1 password=se\\ cret dbname=d",
        "postgresql://u:se%20cret%40x@h:1/d",
        "postgresql://u@h:1/d?password=se-cret-x",
    ],
)
def test_db_url_masks_every_spelling(cli, dsn):
    result = cli("db", "url", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "cret" not in result.output and "***" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("stats",),
        ("stats", "--json"),
        ("--debug", "list", "--json"),
        ("--debug", "submit", "three", "{}"),
        ("recover", "--json"),
        ("db", "status", "--json"),
        ("--debug", "db", "status"),
        ("init", "--json"),
    ],
)
def test_errors_never_show_the_password(cli, args):
    port = free_port()
    for dsn in (
        f"host=127.0.0.1 port={port} user=bob password={PASSWORD} dbname=x",
        f"postgresql://bob:{PASSWORD}@127.0.0.1:{port}/x",
    ):
        via_option = cli(*args, "--dsn", dsn)
        via_env = cli(*args, env={"WFCTL_DSN": dsn})
        for result in (via_option, via_env):
            assert result.exit_code == 4, result.output
            assert "cannot connect to bob@127.0.0.1" in result.stderr
            no_password(result.stdout, result.stderr)


def test_wrong_password_with_debug(cli, pw_dsn):
    wrong = pw_dsn.replace(PASSWORD, PASSWORD[::-1])
    result = cli("--debug", "--json", "stats", "--dsn", wrong)
    assert result.exit_code == 4 and "authentication failed" in result.stderr
    assert PASSWORD[::-1] not in result.output


@pytest.mark.parametrize(("mode", "warned"), [(0o644, True), (0o604, True), (0o640, True), (0o600, False)])
def test_readable_config_with_password_draws_a_warning(cli, clean_env, mode, warned):
    config = clean_env / "wfctl.toml"
    write_config(config, f"host=db1 port=1 user=u password={PASSWORD} dbname=d", mode)
    result = cli("db", "url")
    assert result.exit_code == 0, result.output
    no_password(result.stdout, result.stderr)
    assert "password=***" in result.stdout
    if warned:
        assert result.stderr == (
            f"wfctl: warning: {config} holds a password and is readable by other users: "
            f"run `chmod 600 {config}`\n"
            f"wfctl: {HIDDEN_NOTICE}\n"
        )
    else:
        assert result.stderr == f"wfctl: {HIDDEN_NOTICE}\n"


def test_readable_config_without_password_is_fine(cli, clean_env):
    write_config(clean_env / "wfctl.toml", "host=db1 port=1 user=u dbname=d", 0o644)
    result = cli("db", "url")
    assert result.exit_code == 0 and result.stderr == ""
