"""What a run's events add to the series (metrics.series): an observer of runs
(agent.observers), called in the process that recorded them, once committed. A counter or a
histogram moves per event; the one read of the database is a model's price, at most once a
minute per model and process."""

import time
from collections.abc import Sequence

from django.utils import timezone

from accounting.prices import Rate, rate_at
from agent.connections import release_connection
from agent.models import AgentRun
from core.events import (
    ApprovalRequested,
    BreakerTripped,
    EndCause,
    Event,
    ModelReplied,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
)
from metrics import series

# A price changed in the console reaches the cost series this late at most (the ledger, priced
# as each turn is recorded, is the exact account).
PRICE_SECONDS = 60.0
MODEL_FAILED = frozenset({EndCause.MODEL_DOWN, EndCause.MODEL_TOO_SLOW})

_prices: dict[str, tuple[float, Rate | None]] = {}


def heard(run: AgentRun, events: Sequence[Event]) -> None:
    for event in events:
        match event:
            case ModelReplied():
                turn(run, event)
            case ToolCallFinished():
                series.TOOL_CALLS.labels(event.tool, str(event.status)).inc()
                series.TOOL_SECONDS.labels(event.tool).observe(event.duration)
            case BreakerTripped():
                series.BREAKER_TRIPS.labels(str(event.reason)).inc()
            case ApprovalRequested():
                series.APPROVALS_REQUESTED.labels(event.tool).inc()
            case RunStarted():
                started(run)
            case RunResumed():
                series.RESUMES.labels(str(event.reason)).inc()
            case RunFinished():
                finished(run, event)


def started(run: AgentRun) -> None:
    series.RUNS_STARTED.labels(run.provider, run.model).inc()
    if run.started_at is not None:
        series.PICKUP.observe(max(0.0, (run.started_at - run.created_at).total_seconds()))


def finished(run: AgentRun, end: RunFinished) -> None:
    why = end.halt_reason or end.cause or ""
    series.RUNS_FINISHED.labels(str(end.status), str(why)).inc()
    if end.cause in MODEL_FAILED:
        series.MODEL_ERRORS.labels(run.provider, run.model, "failed").inc()


def turn(run: AgentRun, reply: ModelReplied) -> None:
    provider, model = run.provider, run.model
    series.TURN.labels(provider, model).observe(reply.seconds)
    if reply.retried:
        series.MODEL_ERRORS.labels(provider, model, "retried").inc(len(reply.retried))
    series.TOKENS.labels(provider, model, "prompt").inc(reply.prompt_tokens)
    series.TOKENS.labels(provider, model, "completion").inc(reply.completion_tokens)
    cached = min(reply.cached_tokens, reply.prompt_tokens)
    series.TOKENS.labels(provider, model, "cached").inc(cached)
    rate = price(model)
    if rate is None:
        series.UNPRICED.labels(model).inc()
        return
    cost = rate.cost(reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens)
    series.COST.labels(model, rate.currency).inc(float(cost))


def price(model: str) -> Rate | None:
    """The model's price now, read again at most every PRICE_SECONDS (a race only reads it
    twice)."""
    now = time.monotonic()
    known = _prices.get(model)
    if known is not None and known[0] > now:
        return known[1]
    try:
        rate = rate_at(model, timezone.now())
    finally:
        release_connection()  # a run's thread holds no connection between its writes
    _prices[model] = (now + PRICE_SECONDS, rate)
    return rate
