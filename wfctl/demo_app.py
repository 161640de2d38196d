"""The workflows `wfctl demo` runs: a small shop's order flow, with some made to go wrong, and a
bulk order that fans out to stock checks in ten warehouses and waits for a manager's approval."""

from __future__ import annotations

import random
import time
from typing import Any

import wfctl


def charge_card(amount: float) -> dict[str, Any]:
    time.sleep(random.uniform(0.02, 0.15))
    return {"charged": amount, "currency": "EUR"}


def reserve_stock(sku: str) -> str:
    time.sleep(random.uniform(0.02, 0.1))
    return f"reserved {sku}"


def ship_parcel(sku: str, carrier: str, hang: bool = False) -> str:
    if hang:  # the demo kills this worker while it is stuck here
        time.sleep(3600)
    time.sleep(random.uniform(0.05, 0.3))
    return f"{sku} shipped with {carrier}"


def count_stock(warehouse: str, sku: str) -> int:
    time.sleep(random.uniform(0.01, 0.05))
    return random.randint(0, 120)


def send_email(address: str, flaky: bool = False, attempt: int = 1) -> str:
    if flaky and attempt == 1:
        raise ConnectionError("mail server timed out")
    time.sleep(random.uniform(0.01, 0.05))
    return f"mailed {address}"


@wfctl.workflow("demo-order", max_retries=2, retry_base=0.5, retry_cap=2)
def demo_order(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    charge = ctx.step("charge", charge_card, data["amount"])
    ctx.step("reserve", reserve_stock, data["sku"])
    hang = bool(data.get("crash")) and ctx.attempt == 1
    ctx.step("ship", ship_parcel, data["sku"], "dhl", hang)
    ctx.step("email", send_email, data["email"], bool(data.get("flaky")), ctx.attempt)
    return {"charged": charge["charged"]}


WAREHOUSES = ("Berlin", "Hamburg", "Lyon", "Madrid", "Milan", "Oslo", "Porto", "Prague", "Vienna", "Warsaw")


@wfctl.workflow("demo-stock-check", max_retries=2, retry_base=0.5, retry_cap=2)
def demo_stock_check(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    units = ctx.step("count", count_stock, data["warehouse"], data["sku"])
    return {"warehouse": data["warehouse"], "units": units}


@wfctl.workflow("demo-bulk-order", max_retries=2, retry_base=0.5, retry_cap=2, timeout="10m")
def demo_bulk_order(ctx: wfctl.Context, data: dict[str, Any]) -> dict[str, Any]:
    # fan out: one child workflow per warehouse (started in one step), then join; the parent is
    # parked meanwhile, and the last check to finish wakes it
    checks = ctx.start_children(
        "demo-stock-check", [{"warehouse": w, "sku": data["sku"]} for w in WAREHOUSES]
    )
    stock = ctx.wait(checks)
    units = sum(s["units"] for s in stock)
    ctx.set_event("stock", {"units": units, "warehouses": len(stock)})
    # parked again until `wfctl send ID approval '{"approved_by": ...}'` (or ten minutes pass)
    approval = ctx.recv("approval", timeout="10m")
    if approval is None:
        return {"approved": False, "units_in_stock": units}
    charge = ctx.step("charge", charge_card, data["amount"])
    ctx.step("ship", ship_parcel, data["sku"], "freight")
    return {"charged": charge["charged"], "units_in_stock": units, "approved_by": approval["approved_by"]}
