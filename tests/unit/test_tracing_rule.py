"""When wfctl traces by the environment alone (wfctl/tracing.py ``configured``): the SDK's own
variables, read as the SDK reads them. (That nothing of OpenTelemetry is imported without them:
tests/process/test_tracing_processes.py.)"""

from __future__ import annotations

import pytest

from wfctl.tracing import configured, exporter_names


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "shop"}, False),  # a name alone exports nothing
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": " otlp , console "}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_the_environment_turns_tracing_on_as_the_sdk_reads_it(env, on):
    assert configured(env) is on


def test_exporters_are_named_in_order():
    assert exporter_names({"OTEL_TRACES_EXPORTER": "otlp, console,"}) == ["otlp", "console"]
