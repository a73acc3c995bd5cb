"""Where a run was started from, for its trace to link to: the span current in the thread that
submitted it (agent.runs' submit functions create the run's row there, in the web request), which
is an instrumentation's request span, or the caller's span from the request's `traceparent`
header (tracing.middleware). Recorded as the row is created, read when its first attempt begins."""

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext, TraceFlags

from agent.models import AgentRun
from tracing.models import RunOrigin


def record_origin(sender: type[AgentRun], instance: AgentRun, created: bool, **_: Any) -> None:
    """post_save of a run: a new one remembers the span it was started under, if any."""
    if not created:
        return
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return
    RunOrigin.objects.create(
        run=instance,
        trace_id=trace.format_trace_id(context.trace_id),
        span_id=trace.format_span_id(context.span_id),
    )


def origin_of(run_id: int) -> SpanContext | None:
    origin = RunOrigin.objects.filter(run_id=run_id).first()
    if origin is None:
        return None
    return SpanContext(
        trace_id=int(origin.trace_id, 16),
        span_id=int(origin.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
