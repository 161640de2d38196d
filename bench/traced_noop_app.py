"""The benchmark's workflows (``bench.noop_app``) with tracing on: the application installs a
global TracerProvider whose one span processor keeps nothing, so every span wfctl makes (the
execution's, each step's) is made and ended with its attributes, sampled, and then dropped: the
cost of tracing in the worker without any exporter's. Run as a variant of bench/throughput.py:

    python -m bench.throughput --variant 'traced=--app bench.traced_noop_app'
"""

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from bench.noop_app import noop3

__all__ = ["noop3"]


class Dropped(SpanProcessor):
    """A processor whose every method is the base class's: nothing kept, nothing exported."""


provider = TracerProvider()
provider.add_span_processor(Dropped())
trace.set_tracer_provider(provider)
