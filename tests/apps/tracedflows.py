"""Workflows for tests/process/test_tracing_processes.py, in an application that installs its
own global OpenTelemetry TracerProvider when it is imported (as an application configured at
start does): a worker that loads it with ``--app`` makes its spans with that provider, whose
exporter appends each finished span as one JSON line to $WFCTL_TEST_SPANS."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import wfctl


class LinesExporter(SpanExporter):
    """Each span: name, trace and span ids, its parent's id, its attributes, its links."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                record = {
                    "name": span.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                    "links": [
                        {"trace_id": f"{ln.context.trace_id:032x}", "span_id": f"{ln.context.span_id:016x}"}
                        for ln in span.links
                    ],
                }
                out.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get("WFCTL_TEST_SPANS"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LinesExporter(os.environ["WFCTL_TEST_SPANS"])))
    trace.set_tracer_provider(provider)


@wfctl.workflow("traced-flow", max_retries=0)
def traced_flow(ctx: wfctl.Context, data: Any) -> str:
    ctx.step("first", lambda: 1)
    return ctx.step("second", lambda: "done")


@wfctl.workflow("traced-recv", max_retries=0)
def traced_recv(ctx: wfctl.Context, data: Any) -> Any:
    return ctx.recv("approval")
