"""The tracer: the OpenTelemetry SDK's, exporting over OTLP/HTTP in batches from a thread of its
own, so a slow or absent collector never slows a run (a full queue drops spans, never waits).
The SDK reads the OTEL_* variables itself (endpoint, headers, timeout, batch sizes, sampler,
resource); Loop only names the service "loop" when nobody else did."""

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


def exporting_tracer(convention: Convention) -> tuple[TracerProvider, Tracer]:
    """A provider exporting to the OTLP endpoint of the environment, flushed as the process
    exits (the SDK's own atexit shutdown: a worker stopped by SIGTERM returns from its loop and
    exits normally), and its tracer, stamped with the convention's schema URL."""
    provider = TracerProvider(resource=service_resource(), id_generator=RunIds())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("loop.tracing", schema_url=convention.schema_url)
    return provider, tracer
