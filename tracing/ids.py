"""A run's trace id and each of its attempts' `invoke_agent` span ids, derived from the run and
the site's secret: every worker that takes the run up (a resume, a Continue) finds its trace
and its earlier attempts' spans without reading anything, and nobody can guess a trace from a
run's number without the secret."""

import hashlib
import hmac
from contextvars import ContextVar

from django.conf import settings
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanContext, TraceFlags


def _derived(label: str, bits: int) -> int:
    digest = hmac.new(settings.SECRET_KEY.encode(), label.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1  # 0 is the invalid id


def run_trace_id(run_id: int) -> int:
    return _derived(f"loop.trace.run:{run_id}", 128)


def attempt_span_id(run_id: int, attempt: int) -> int:
    return _derived(f"loop.span.run:{run_id}:{attempt}", 64)


def attempt_context(run_id: int, attempt: int) -> SpanContext:
    """The context of the run's `invoke_agent` span at `attempt` (for links to it)."""
    return SpanContext(
        trace_id=run_trace_id(run_id),
        span_id=attempt_span_id(run_id, attempt),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


# The ids the next root span takes (set around starting an attempt's span), else random ones.
_next_ids: ContextVar[tuple[int, int] | None] = ContextVar("loop_next_span_ids", default=None)


class RunIds(IdGenerator):
    """The SDK's id generator, but for the span `starting_attempt` starts: the run's ids."""

    def __init__(self) -> None:
        self.random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        ids = _next_ids.get()
        return self.random.generate_trace_id() if ids is None else ids[0]

    def generate_span_id(self) -> int:
        ids = _next_ids.get()
        if ids is None:
            return self.random.generate_span_id()
        _next_ids.set(None)  # one span only
        return ids[1]


class starting_attempt:
    """Within it, the root span started next has the run's trace id and the attempt's span id."""

    def __init__(self, run_id: int, attempt: int) -> None:
        self.ids = (run_trace_id(run_id), attempt_span_id(run_id, attempt))

    def __enter__(self) -> None:
        self.token = _next_ids.set(self.ids)

    def __exit__(self, *exc: object) -> None:
        _next_ids.reset(self.token)
