"""Workflows for the error and attempt-history tests (tests/process/test_error_history.py)."""

from __future__ import annotations

from typing import Any

from testflows import effect, gate

import wfctl


class Declined(Exception):
    pass


class SoftDeclined(Declined):
    pass


def declined(message: str) -> None:
    raise SoftDeclined(message)


def permanent(message: str) -> None:
    raise wfctl.PermanentError(message)


def bad_value(message: str) -> None:
    raise ValueError(message)


@wfctl.workflow("permanent_step", max_retries=5)
def permanent_step(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    ctx.step("prepare", effect, str(ctx.workflow_id), "prepare", 1)
    ctx.step("charge", permanent, "card declined")


@wfctl.workflow("permanent_body", max_retries=5)
def permanent_body(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    ctx.step("prepare", effect, str(ctx.workflow_id), "prepare", 1)
    raise wfctl.PermanentError("order is void")


@wfctl.workflow("dont_retry", max_retries=5, retry_base=30, dont_retry=(Declined, KeyError))
def dont_retry(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    if data.get("raise") == "value":  # not listed: retried as usual
        ctx.step("check", bad_value, f"bad value on attempt {ctx.attempt}")
    ctx.step("charge", declined, "insufficient funds")  # a subclass of a listed class


@wfctl.workflow("body_error", max_retries=0)
def body_error(ctx: wfctl.Context, data: dict[str, Any]) -> None:
    ctx.step("prepare", effect, str(ctx.workflow_id), "prepare", 1)
    values: dict[str, int] = {}
    values["missing"] += 1  # KeyError raised by the workflow body, outside any step


@wfctl.workflow("napper", max_retries=0)
def napper(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    ctx.step("before", effect, str(ctx.workflow_id), "before", 1)
    ctx.sleep("300ms")
    return "woke"


@wfctl.workflow("held_step", max_retries=3)
def held(ctx: wfctl.Context, data: dict[str, Any]) -> str:
    wid = str(ctx.workflow_id)
    ctx.step("one", effect, wid, "one", 1)
    ctx.step("two", gate, wid, "two", 2)
    return "done"
