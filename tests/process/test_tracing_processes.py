"""Traces across processes (wfctl/tracing.py): a `wfctl worker` process continues the trace of a
submit made elsewhere, the context travelling in the run's row; `wfctl submit` traces by the
SDK's environment alone; and without it nothing of OpenTelemetry is imported by the CLI or by a
worker. (The spans themselves, in one process: tests/db/test_tracing.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import APPS, hermetic, isolated_env, rows
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import wfctl
from wfctl import tracing

#: The SDK's variables, none set: tracing off by the environment.
NO_OTEL = {"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_SDK_DISABLED": ""}


def test_a_worker_process_continues_the_trace_of_a_submit_made_here(workers, dsn, tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        wid = wfctl.submit(dsn, "traced-flow")
    finally:
        tracing.use(None)
    [submit] = exporter.get_finished_spans()
    spans_file = tmp_path / "spans.jsonl"
    workers.run(app="tracedflows", env={**NO_OTEL, "WFCTL_TEST_SPANS": str(spans_file)})

    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    [run] = [s for s in spans if s["name"] == "wfctl.run traced-flow"]
    assert run["trace_id"] == f"{submit.context.trace_id:032x}"
    assert run["parent_id"] == f"{submit.context.span_id:016x}"
    assert run["attributes"]["wfctl.workflow.id"] == str(wid)
    assert run["attributes"]["wfctl.outcome"] == "completed"
    steps = [s for s in spans if s["name"].startswith("wfctl.step")]
    assert sorted(s["name"] for s in steps) == ["wfctl.step first", "wfctl.step second"]
    assert {s["parent_id"] for s in steps} == {run["span_id"]}


def test_a_message_links_the_run_that_takes_it_to_the_span_that_sent_it(workers, dsn, tmp_path):
    """The run stays in its submitter's trace; its recv span links to the sender's, in another
    trace (the message carries the sender's context through the database)."""
    wid = wfctl.submit(dsn, "traced-recv")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        with provider.get_tracer("tests").start_as_current_span("approver"):
            wfctl.send(dsn, wid, "approval", {"ok": True})
    finally:
        tracing.use(None)
    [send] = [s for s in exporter.get_finished_spans() if s.name == "wfctl.send"]
    spans_file = tmp_path / "spans.jsonl"
    workers.run(app="tracedflows", env={**NO_OTEL, "WFCTL_TEST_SPANS": str(spans_file)})

    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    [run] = [s for s in spans if s["name"] == "wfctl.run traced-recv"]
    [recv] = [s for s in spans if s["name"] == "wfctl.recv approval"]
    assert run["attributes"]["wfctl.outcome"] == "completed"
    assert (recv["trace_id"], recv["parent_id"]) == (run["trace_id"], run["span_id"])
    sender = {"trace_id": f"{send.context.trace_id:032x}", "span_id": f"{send.context.span_id:016x}"}
    assert recv["links"] == [sender]
    assert recv["trace_id"] != f"{send.context.trace_id:032x}"
    # what carried it: the message's row
    [(stored,)] = rows(dsn, "SELECT trace_context FROM workflow_messages WHERE workflow_id = %s", wid)
    assert stored is not None and f"{send.context.span_id:016x}" in stored


def test_wfctl_submit_traces_by_the_environment_and_the_worker_continues_it(workers, dsn, tmp_path):
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "shop-tests"}
    done = workers.wfctl("submit", "traced-flow", "{}", env=env)
    assert done.exit_code == 0, done.stderr
    [(wid, stored)] = rows(dsn, "SELECT id, trace_context FROM workflows")
    _version, trace_id, span_id, _flags = stored.split("-")
    # the console exporter's span, flushed at the CLI's exit: the same context as stored
    assert '"name": "wfctl.submit traced-flow"' in done.stdout
    assert f'"trace_id": "0x{trace_id}"' in done.stdout and f'"span_id": "0x{span_id}"' in done.stdout
    assert '"service.name": "shop-tests"' in done.stdout

    spans_file = tmp_path / "spans.jsonl"
    workers.run(app="tracedflows", env={**NO_OTEL, "WFCTL_TEST_SPANS": str(spans_file)})
    [run] = [
        json.loads(line) for line in spans_file.read_text().splitlines() if "wfctl.run traced-flow" in line
    ]
    assert (run["trace_id"], run["parent_id"]) == (trace_id, span_id)
    assert run["attributes"]["wfctl.workflow.id"] == str(wid)


def test_without_tracing_the_cli_and_a_worker_import_nothing_of_opentelemetry(workers, dsn):
    code = (
        "import sys\n"
        "from wfctl.cli.app import main\n"
        "sys.argv = ['wfctl', 'submit', 'otel-probe', '{}']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = hermetic(isolated_env(WFCTL_DSN=dsn, **NO_OTEL), APPS)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=APPS, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    [(stored,)] = rows(dsn, "SELECT trace_context FROM workflows")
    assert stored is None
    workers.run(app="probeflows", env=NO_OTEL)
    assert rows(dsn, "SELECT status, output_data FROM workflows") == [("completed", [])]
