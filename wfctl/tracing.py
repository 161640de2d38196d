"""OpenTelemetry traces (the optional extra ``wfctl[otel]``, docs/guides/tracing.md): spans of
submits, sends, executions, steps and tries, and the W3C trace context a run carries through
the database from its submit to every execution of it.

Nothing here imports ``opentelemetry`` until tracing is on, which it is when either

- an application installed a global TracerProvider (``opentelemetry.trace`` is imported and its
  provider is not the default proxy), or ``use(provider)`` gave wfctl one; or
- the environment configures it as the SDK reads it: ``OTEL_SDK_DISABLED`` is not ``true``, and
  ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none`` or, without it, an OTLP
  endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``),
  and the SDK is installed. wfctl then makes the process's global provider: resource from
  ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, sampler from ``OTEL_TRACES_SAMPLER``,
  one batch processor per exporter named (the SDK's ``opentelemetry_traces_exporter`` entry
  points; ``otlp`` when only an endpoint is set).

When it is off every call here answers None (or the shared ``OFF``) without allocating, and the
worker's hot path (``Context.step``) looks at one attribute.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from wfctl.errors import ConfigError, StepError
from wfctl.journal import ControlFlow, Parked, StepFailed

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

#: The instrumentation scope's name.
SCOPE = "wfctl"
#: The entry points of the SDK's span exporters (what ``OTEL_TRACES_EXPORTER`` names).
EXPORTERS = "opentelemetry_traces_exporter"


def configured(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for traces (the SDK installed or not): see the module's docstring."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = exporter_names(env)
    if names:
        return names != ["none"]
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (comma-separated), in order."""
    return [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]


class _State:
    """What this process decided: the environment's tracer (decided once), a provider given by
    ``use``, the application's global provider's tracer (looked at while none of these is)."""

    decided = False
    from_env: Tracer | None = None
    given: Tracer | None = None
    app_provider: object | None = None
    app_tracer: Tracer | None = None


_state = _State()


def use(provider: TracerProvider | None) -> None:
    """Make wfctl's spans with ``provider`` (None: back to the rule of the module's docstring),
    in place of the global provider: for an application that keeps its own, and for tests."""
    _state.given = None if provider is None else provider.get_tracer(SCOPE)


def tracer() -> Tracer | None:
    """The tracer wfctl's spans go to, or None when tracing is off."""
    if _state.given is not None:
        return _state.given
    if not _state.decided:
        _state.from_env = _from_environment()
        _state.decided = True
    if _state.from_env is not None:
        return _state.from_env
    return _from_application()


def _from_application() -> Tracer | None:
    """The tracer of a global provider some application installed (nothing is imported: an
    application that did not import ``opentelemetry.trace`` installed none)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    if provider is not _state.app_provider:
        _state.app_provider, _state.app_tracer = provider, provider.get_tracer(SCOPE)
    return _state.app_tracer


def _from_environment() -> Tracer | None:
    if not configured(os.environ):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:  # the extra is not installed: tracing stays off
        return None
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return current.get_tracer(SCOPE)  # the application's, installed before wfctl looked
    provider = TracerProvider(resource=Resource.create())
    for name in exporter_names(os.environ) or ["otlp"]:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)()))
    trace.set_tracer_provider(provider)
    return provider.get_tracer(SCOPE)


def _exporter(name: str) -> Callable[[], Any]:
    """The span exporter class the SDK's entry point ``name`` names."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=EXPORTERS, name=name))
    if not found:
        hint = " (pip install opentelemetry-exporter-otlp)" if name.startswith("otlp") else ""
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER: no installed package provides the span exporter {name!r}{hint}"
        )
    exporter: Callable[[], Any] = found[0].load()
    return exporter


# -- the trace context a run carries ---------------------------------------------------------------


def current_context() -> str | None:
    """The current span's W3C context as the database stores it (``workflows.trace_context``):
    the ``traceparent``, then a line with the ``tracestate`` when there is one; None when no
    span is recording."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    parent = carrier.get("traceparent")
    if parent is None:
        return None
    state = carrier.get("tracestate")
    return f"{parent}\n{state}" if state else parent


def stored_context(text: str | None) -> Any:
    """The OpenTelemetry context of a stored ``trace_context`` (None: no parent)."""
    if not text:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent, _, state = text.partition("\n")
    carrier = {"traceparent": parent.strip()}
    if state.strip():
        carrier["tracestate"] = state.strip()
    return TraceContextTextMapPropagator().extract(carrier)


# -- submit and send ---------------------------------------------------------------------------------


class Submitting:
    """A submit (or send) in progress: the trace context to store with it, and its span."""

    def __init__(self, span: Span | None = None, trace_context: str | None = None) -> None:
        self.span = span
        self.trace_context = trace_context

    def submitted(self, workflow_id: UUID, created: bool | None = None) -> None:
        """The run it stored (or found by its key: ``created`` False; None: a send's run)."""
        if self.span is not None:
            self.span.set_attribute("wfctl.workflow.id", str(workflow_id))
            if created is not None:
                self.span.set_attribute("wfctl.submit.created", created)


#: What a submit sees when tracing is off: no span, nothing stored.
OFF = Submitting()


@contextmanager
def submitting(workflow_type: str, *, count: int | None = None) -> Iterator[Submitting]:
    """A span ``wfctl.submit <type>`` (a producer's) around a submit of one run (``count``: of
    a batch), and the context the run(s) store so that their executions join this trace."""
    found = tracer()
    if found is None:
        yield OFF
        return
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {"wfctl.workflow.type": workflow_type}
    if count is not None:
        attributes["wfctl.batch.size"] = count
    with found.start_as_current_span(
        f"wfctl.submit {workflow_type}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield Submitting(span, current_context())


@contextmanager
def sending(topic: str) -> Iterator[Submitting]:
    """A span ``wfctl.send`` (a producer's) around a message sent to a run."""
    found = tracer()
    if found is None:
        yield OFF
        return
    from opentelemetry.trace import SpanKind

    with found.start_as_current_span(
        "wfctl.send", kind=SpanKind.PRODUCER, attributes={"wfctl.message.topic": topic}
    ) as span:
        yield Submitting(span, current_context())


# -- a run's execution on a worker ---------------------------------------------------------------------


class RunTracing:
    """The spans of one execution of a run (made only while tracing is on): the execution's,
    its steps' and their tries'. Every execution of a run is a child of the span that submitted
    it (the stored trace context), so a run's parks, retries and recoveries stay in one trace."""

    def __init__(self, found: Tracer) -> None:
        self._tracer = found

    @contextmanager
    def execution(
        self,
        workflow_id: UUID,
        workflow_type: str,
        attempt: int,
        epoch: int,
        resumed_from: int,
        trace_context: str | None,
    ) -> Iterator[Span]:
        """The span ``wfctl.run <type>`` (a consumer's) of one claim-to-end; the caller sets its
        outcome (``outcome``)."""
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "wfctl.workflow.id": str(workflow_id),
            "wfctl.workflow.type": workflow_type,
            "wfctl.attempt": attempt,
            "wfctl.lease.epoch": epoch,
            "wfctl.resumed": resumed_from > 0,
        }
        with self._tracer.start_as_current_span(
            f"wfctl.run {workflow_type}",
            context=stored_context(trace_context),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if resumed_from > 0:
                span.add_event("wfctl.resumed", {"wfctl.step.number": resumed_from})
            yield span

    @staticmethod
    def outcome(span: Span, outcome: str | None, error: str | None = None) -> None:
        """How the execution ended: completed, failed, retry, parked, released, lost, error."""
        span.set_attribute("wfctl.outcome", outcome or "unknown")
        if outcome in ("failed", "retry", "error"):
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, error))

    @staticmethod
    def parked(waiting_for: str, until: datetime | None) -> None:
        """An event on the current (execution) span: the run parks, waiting for what, until
        when (none: as long as it takes)."""
        from opentelemetry import trace

        attributes: dict[str, Any] = {"wfctl.park.waiting_for": waiting_for}
        if until is not None:
            attributes["wfctl.park.until"] = until.isoformat()
        trace.get_current_span().add_event("wfctl.parked", attributes)

    def received(self, number: int, topic: str, message: Any, trace_context: str | None) -> None:
        """The span ``wfctl.recv <topic>`` (a consumer's) of a message the run took, linked to
        the span that sent it when the sender was traced (the message's stored context): the
        sender's trace and the run's meet there. A replay of the recv makes none."""
        from opentelemetry import trace
        from opentelemetry.trace import Link, SpanKind

        links = []
        sender = trace.get_current_span(stored_context(trace_context)).get_span_context()
        if trace_context and sender.is_valid:
            links.append(Link(sender))
        attributes: dict[str, Any] = {"wfctl.step.number": number, "wfctl.message.topic": topic}
        if message is not None:
            attributes["wfctl.message.id"] = message
        self._tracer.start_span(
            f"wfctl.recv {topic}", kind=SpanKind.CONSUMER, links=links, attributes=attributes
        ).end()

    @contextmanager
    def step(self, number: int, name: str, kind: str = "step") -> Iterator[Span]:
        """The span ``wfctl.step <name>`` of a step that runs (a replayed one has none): its
        error when the workflow gets a StepError, its outcome when the run parks or stops."""
        with self._tracer.start_as_current_span(
            f"wfctl.step {name}",
            attributes={"wfctl.step.number": number, "wfctl.step.name": name, "wfctl.step.kind": kind},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Parked:
                span.set_attribute("wfctl.step.outcome", "parked")
                raise
            except StepFailed as failed:
                _error(span, failed.error)
                raise
            except ControlFlow as stopped:
                span.set_attribute("wfctl.step.outcome", type(stopped).__name__.lower())
                raise
            except StepError as error:  # the function's own error, as the tries recorded it
                _error(span, error.__cause__ if error.__cause__ is not None else error)
                raise
            except BaseException as error:
                _error(span, error)
                raise

    def attempt(self, name: str, made: int, call: Callable[..., Any], *args: Any) -> Any:
        """Try ``made`` of step ``name`` (a step with retries): ``call(*args)`` in a span
        ``wfctl.try <name>``, the exception recorded when it raises."""
        with self._tracer.start_as_current_span(
            f"wfctl.try {name}",
            attributes={"wfctl.step.name": name, "wfctl.step.try": made},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return call(*args)
            except BaseException as error:
                _error(span, error)
                raise

    @staticmethod
    def tries(span: Span, made: int) -> None:
        span.set_attribute("wfctl.step.tries", made)


def _error(span: Span, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def run_tracing() -> RunTracing | None:
    """The spans of an execution about to start, or None when tracing is off."""
    found = tracer()
    return None if found is None else RunTracing(found)
