"""A workflow that says which modules of OpenTelemetry its worker imported, in an application
that imports none itself (tests/process/test_tracing_processes.py)."""

from __future__ import annotations

import sys
from typing import Any

import wfctl


@wfctl.workflow("otel-probe", max_retries=0)
def otel_probe(ctx: wfctl.Context, data: Any) -> list[str]:
    return ctx.step("look", lambda: sorted(m for m in sys.modules if m.startswith("opentelemetry")))
