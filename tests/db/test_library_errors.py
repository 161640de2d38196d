"""The library raises its own exceptions, exported from ``wfctl``; only the
CLI turns them into exit codes, in ``wfctl/exits.py``."""

from __future__ import annotations

import ast
import uuid

import pytest
from helpers import HERE

import wfctl
from wfctl import control, exits
from wfctl.errors import WfctlError

PUBLIC = [
    "AppError",
    "ConfigError",
    "ConnectionFailed",
    "Fenced",
    "InvalidInput",
    "InvalidState",
    "NotFound",
    "PermissionDenied",
    "SchemaError",
    "ServerError",
    "WfctlError",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_error_is_exported_and_a_wfctl_error_without_an_exit_code(name):
    cls = getattr(wfctl, name)
    assert issubclass(cls, WfctlError) and name in wfctl.__all__
    assert not hasattr(cls, "exit_code")  # codes are the CLI's business
    assert exits.code_for(cls("x")) in exits.EXIT_CODES


def test_invalid_input_is_a_value_error_and_fenced_an_invalid_state():
    assert issubclass(wfctl.InvalidInput, ValueError)
    assert issubclass(wfctl.Fenced, wfctl.InvalidState)
    assert exits.code_for(wfctl.Fenced("x")) == exits.code_for(wfctl.InvalidState("x")) == 7
    assert exits.code_for(RuntimeError("x")) == exits.INTERNAL == 1


def test_codes_are_distinct_per_class():
    codes = [exits.code_for(getattr(wfctl, n)("x")) for n in PUBLIC if n not in ("Fenced", "WfctlError")]
    assert len(codes) == len(set(codes)) and exits.INTERNAL not in codes


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input": float("nan")}, "cannot be stored"),
        ({"input": "\x00"}, "cannot be stored"),
        ({"priority": 2**40}, "priority must be between"),
        ({"max_retries": -1}, "max_retries cannot be negative"),
        ({"delay": "soon"}, "invalid delay 'soon'"),
        ({"key": "a\x00b"}, "NUL"),
    ],
)
def test_submit_raises_invalid_input(dsn, kwargs, match):
    with pytest.raises(wfctl.InvalidInput, match=match) as info:
        wfctl.submit(dsn, "order", **kwargs)
    assert type(info.value).__module__ == "wfctl.errors"


def test_submit_to_an_unreachable_database_raises_connection_failed(tmp_path):
    with pytest.raises(wfctl.ConnectionFailed):
        wfctl.submit(f"host={tmp_path} port=1 connect_timeout=2", "order")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "1 to 100 characters"),
        ({"name": "x", "max_retries": -1}, "max_retries must be >= 0"),
        ({"name": "x", "retry_base": "often"}, "invalid retry_base"),
        ({"name": "x", "retry_cap": 10**12}, "between 0 and 100 years"),
    ],
)
def test_workflow_decorator_raises_invalid_input(kwargs, match):
    with pytest.raises(wfctl.InvalidInput, match=match):
        wfctl.workflow(**kwargs)


def test_registering_a_name_twice_raises_invalid_input():
    from wfctl.registry import Registry

    registry = Registry()
    wfctl.workflow("twice", registry=registry)(lambda ctx, data: None)
    with pytest.raises(wfctl.InvalidInput, match="already registered"):
        wfctl.workflow("twice", registry=registry)(lambda ctx, data: 1)


def test_control_of_an_unknown_id_raises_not_found(conn):
    with pytest.raises(wfctl.NotFound):
        control.cancel(conn, uuid.uuid4())


def test_only_exits_and_the_cli_speak_of_exit_codes():
    """No engine module raises typer.Exit or reads an error's exit code; sys.exit / os._exit
    with a literal number appear nowhere below the CLI."""
    offenders = []
    for path in sorted((HERE.parent / "wfctl").rglob("*.py")):
        rel = path.relative_to(HERE.parent).as_posix()
        if rel.startswith("wfctl/cli/") or rel == "wfctl/exits.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "exit_code":
                offenders.append(f"{rel}:{node.lineno}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("exit", "_exit")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == []


def test_submit_to_a_database_without_the_schema_raises_schema_error(empty_dsn):
    import psycopg

    with pytest.raises(wfctl.SchemaError, match="run `wfctl init`") as info:
        wfctl.submit(empty_dsn, "order")
    # the library submits through wfctl_submit_one(), which a database without wfctl lacks
    assert isinstance(info.value.__cause__, psycopg.errors.UndefinedFunction)
    with psycopg.connect(empty_dsn) as conn, pytest.raises(wfctl.SchemaError):
        from wfctl.client import submit_many

        submit_many(conn, "order", ["{}"])
