"""The tracer: the OpenTelemetry SDK's, exporting over OTLP/HTTP in batches from a thread of its
own, so a slow or absent collector never slows a run (a full queue drops spans, never waits).
The SDK reads the OTEL_* variables itself (endpoint, headers, timeout, batch sizes, sampler,
resource); Loop only names the service "loop" when nobody else did."""

import atexit
import threading
from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer

from tracing.conventions import Convention
from tracing.ids import RunIds

SERVICE = "loop"


def service_resource() -> Resource:
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: SERVICE}))
    return resource


# How long a process that exits waits for its last spans' export: a collector that does not
# answer must not keep a stopping worker past its own bound for handing its runs back.
EXIT_FLUSH_SECONDS = 3.0


def exporting_tracer(convention: Convention) -> tuple[TracerProvider, Tracer]:
    """A provider exporting to the OTLP endpoint of the environment, and its tracer, stamped
    with the convention's schema URL. Shut down by `flush_on_exit`, not by the SDK's own exit
    hook, which waits up to 30 s for a collector that does not answer."""
    provider = TracerProvider(
        resource=service_resource(), id_generator=RunIds(), shutdown_on_exit=False
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("loop.tracing", schema_url=convention.schema_url)
    return provider, tracer


def flush_on_exit(provider: TracerProvider, before: Callable[[], object]) -> None:
    """As the process exits (a worker stopped by SIGTERM returns from its loop and exits):
    `before` (the open attempts' spans ended), then the spans not exported yet are, for at
    most EXIT_FLUSH_SECONDS; the exporting thread, a daemon, is left behind after that."""

    def flush() -> None:
        before()
        exporting = threading.Thread(target=provider.shutdown, daemon=True)
        exporting.start()
        exporting.join(EXIT_FLUSH_SECONDS)

    atexit.register(flush)
