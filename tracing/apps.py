from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_save

if TYPE_CHECKING:
    from tracing.spans import RunTraces


class TracingConfig(AppConfig):
    name = "tracing"
    verbose_name = "Traces"

    def ready(self) -> None:
        """Off unless an OTLP endpoint is set (LOOP_TRACES): then runs' events become spans
        and a run's row remembers the span that started it."""
        if not settings.LOOP_TRACES:
            return
        start_tracing()


def start_tracing() -> "RunTraces":
    """The SDK is imported here, not above: a site without traces loads none of it."""
    from opentelemetry import trace

    from agent.models import AgentRun
    from agent.observers import observe
    from tracing.conventions import convention
    from tracing.exporting import exporting_tracer, flush_on_exit
    from tracing.origins import record_origin
    from tracing.spans import RunTraces

    chosen = convention(settings.OTEL_SEMCONV_STABILITY_OPT_IN)
    provider, tracer = exporting_tracer(chosen)
    # The site's provider: a Django instrumentation, if the operator adds one, exports with it.
    trace.set_tracer_provider(provider)
    traces = RunTraces(tracer, chosen, content=settings.LOOP_TRACE_CONTENT)
    observe(traces)
    post_save.connect(record_origin, sender=AgentRun, dispatch_uid="tracing.origin")
    flush_on_exit(provider, before=traces.release_all)
    return traces
