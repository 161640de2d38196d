"""The workflows `wfctl demo` runs: a small shop's order flow, with some made to go wrong."""

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
