"""A run's spans, built from its events as the recorder stores them (agent.observers).

One trace per run (tracing.ids): each attempt at it (its start, each resume or Continue) is an
`invoke_agent Loop` span, linked to the attempts before it and, for the first, to the web
request that started the run (tracing.origins); each model turn is a `chat {model}` span and
each tool call an `execute_tool {tool}` span beneath it. Events carry no clock time: an event is
heard just after it is stored, so a span ends when its event is heard and starts as long before
as the event says the turn or the call took.
"""

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from django.utils import timezone
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode

from accounting.ledger import spend_of_run
from accounting.prices import rate_at
from agent.connections import release_connection
from agent.models import AgentRun
from core.events import (
    ApprovalRequested,
    Event,
    ModelReplied,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStatus,
    ToolCallFinished,
)
from core.results import ToolStatus
from tracing.conventions import Convention
from tracing.ids import attempt_context, starting_attempt
from tracing.origins import origin_of

AGENT = "Loop"
# The earlier attempts an attempt's span links to, latest first (a run resumed more often
# than this links to its latest ones).
LINKED_ATTEMPTS = 32
FAILED = {RunStatus.FAILED, RunStatus.INTERRUPTED}

Cost = tuple[Decimal | None, str]  # a turn's cost (None: price unknown) and its currency


class RunTraces:
    """The observer of runs' events that turns them into spans, in one process."""

    def __init__(self, tracer: trace.Tracer, convention: Convention, *, content: bool) -> None:
        self.tracer = tracer
        self.convention = convention
        self.content = content  # prompts, answers, tool arguments and results recorded
        self.attempts: dict[int, Span] = {}  # the attempt span of each run this process works
        self.lock = threading.Lock()

    def __call__(self, run: AgentRun, events: Sequence[Event]) -> None:
        now = time.time_ns()
        costs = self.turn_costs(run, events)
        for event in events:
            match event:
                case RunStarted():
                    self.begin(run, now, asked=event.task)
                case RunResumed():
                    self.begin(run, now, asked=event.note, resumed=event)
                case ModelReplied():
                    self.turn(run, event, now, costs.get(event.step))
                case ToolCallFinished():
                    self.tool_call(run, event, now)
                case ApprovalRequested():
                    # The run waits for its person, holding no worker: this attempt is over.
                    self.close(run.pk, now, {"loop.run.status": RunStatus.AWAITING_APPROVAL.value})
                case RunFinished():
                    self.finish(run, event, now)

    def begin(
        self, run: AgentRun, now: int, *, asked: str, resumed: RunResumed | None = None
    ) -> None:
        attributes: dict[str, Any] = {
            **self.common(run, "invoke_agent"),
            "gen_ai.agent.name": AGENT,
            "loop.run.id": run.pk,
            "loop.run.attempt": run.attempt,
        }
        if run.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = str(run.conversation_id)
        if resumed is not None:
            attributes["loop.run.resume_reason"] = resumed.reason.value
        if self.content and asked:
            attributes["gen_ai.input.messages"] = messages("user", [text_part(asked)])
        with starting_attempt(run.pk, run.attempt):
            span = self.tracer.start_span(
                f"invoke_agent {AGENT}",
                context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root: the run's own
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=self.links(run, first=resumed is None),
                start_time=now,
            )
        with self.lock:
            earlier = self.attempts.pop(run.pk, None)
            self.attempts[run.pk] = span
        if earlier is not None:  # an attempt of this process that never heard its end
            earlier.end(now)

    def links(self, run: AgentRun, *, first: bool) -> list[Link]:
        """To the run's earlier attempts, and, for its first, to the request that started it."""
        earliest = max(1, run.attempt - LINKED_ATTEMPTS)
        links = [
            Link(attempt_context(run.pk, attempt), {"loop.link": "earlier_attempt"})
            for attempt in range(run.attempt - 1, earliest - 1, -1)
        ]
        with reading():
            origin = origin_of(run.pk) if first else None
        if origin is not None:
            links.append(Link(origin, {"loop.link": "request"}))
        return links

    def turn(self, run: AgentRun, reply: ModelReplied, now: int, cost: Cost | None) -> None:
        reason = finish_reason(reply)
        attributes: dict[str, Any] = {
            **self.common(run, "chat"),
            "gen_ai.usage.input_tokens": reply.prompt_tokens,
            "gen_ai.usage.output_tokens": reply.completion_tokens,
            "gen_ai.response.finish_reasons": [reason],
            "loop.step": reply.step,
        }
        if self.convention.cached_tokens:
            attributes[self.convention.cached_tokens] = reply.cached_tokens
        if reply.retried:
            attributes["loop.retries"] = len(reply.retried)
        attributes |= cost_attributes(cost)
        if self.content:
            parts = [text_part(reply.text)] if reply.text else []
            parts += [
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
                for call in reply.tool_calls
            ]
            attributes["gen_ai.output.messages"] = messages("assistant", parts, reason)
        span = self.tracer.start_span(
            f"chat {run.model}",
            context=self.within(run),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=now - int(reply.seconds * 1e9),
        )
        span.end(now)

    def tool_call(self, run: AgentRun, call: ToolCallFinished, now: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.tool.type": "function",
            "loop.step": call.step,
            "loop.tool.status": call.status.value,
        }
        if call.policy:
            attributes["loop.tool.policy"] = call.policy
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments
            attributes["gen_ai.tool.call.result"] = call.text
        span = self.tracer.start_span(
            f"execute_tool {call.tool}",
            context=self.within(run),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=now - int(call.duration * 1e9),
        )
        if call.status != ToolStatus.OK:
            span.set_attribute("error.type", call.status.value)
            span.set_status(Status(StatusCode.ERROR, call.status.value))
        span.end(now)

    def finish(self, run: AgentRun, end: RunFinished, now: int) -> None:
        attributes: dict[str, Any] = {
            "loop.run.status": end.status.value,
            "gen_ai.usage.input_tokens": end.prompt_tokens,
            "gen_ai.usage.output_tokens": end.completion_tokens,
        }
        if end.halt_reason:
            attributes["loop.run.halt_reason"] = end.halt_reason
        attributes |= run_cost(run.pk)
        if self.content and end.answer:
            attributes["gen_ai.output.messages"] = messages("assistant", [text_part(end.answer)])
        failed = end.status in FAILED
        if failed:
            attributes["error.type"] = end.cause or end.status.value
        self.close(run.pk, now, attributes, error=(end.error or end.status.value) if failed else "")

    def close(self, run_id: int, now: int, attributes: dict[str, Any], error: str = "") -> None:
        with self.lock:
            span = self.attempts.pop(run_id, None)
        if span is None:  # the attempt began in another process, or before tracing was on
            return
        span.set_attributes(attributes)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(now)

    def release_all(self) -> None:
        """End the attempts still open as this process stops (it hands their runs back), so
        their spans are exported with the rest before it exits."""
        with self.lock:
            spans, self.attempts = list(self.attempts.values()), {}
        for span in spans:
            span.set_attribute("loop.run.status", "handed_back")
            span.end()

    def within(self, run: AgentRun) -> Any:
        """The context of a turn's or a call's span: under the run's current attempt (by its
        ids, when this process did not start that span)."""
        with self.lock:
            span = self.attempts.get(run.pk)
        parent = span or NonRecordingSpan(attempt_context(run.pk, run.attempt))
        return trace.set_span_in_context(parent)

    def common(self, run: AgentRun, operation: str) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": operation,
            self.convention.provider: run.provider,
            "gen_ai.request.model": run.model,
        }

    def turn_costs(self, run: AgentRun, events: Sequence[Event]) -> dict[int, Cost]:
        """The cost of the turns among `events`, as the ledger priced them as they were
        recorded a moment ago: from the process's copy of the price table, with no query."""
        replies = [event for event in events if isinstance(event, ModelReplied)]
        if not replies:
            return {}
        with reading():  # the copy is read again at most every CACHE_SECONDS
            rate = rate_at(run.model, timezone.now())
        if rate is None:
            return {reply.step: (None, "") for reply in replies}
        return {
            reply.step: (
                rate.cost(reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens),
                rate.currency,
            )
            for reply in replies
        }


def run_cost(run_id: int) -> dict[str, Any]:
    """The run's cost so far, all its attempts' turns (the ledger's sum), as span attributes."""
    with reading():
        spent = spend_of_run(run_id)
    if not spent.cost_known or len(spent.costs) != 1:  # a turn unpriced, or two currencies
        return cost_attributes(None)
    [(currency, cost)] = spent.costs.items()
    return cost_attributes((cost, currency))


@contextmanager
def reading() -> Iterator[None]:
    """A read in a run's thread, which then gives its connection back, as the recorder does:
    not held across the run's next model call or tool call."""
    try:
        yield
    finally:
        release_connection()


def finish_reason(reply: ModelReplied) -> str:
    if reply.tool_calls:
        return "tool_call"
    return "length" if reply.cut else "stop"


def cost_attributes(cost: Cost | None) -> dict[str, Any]:
    if cost is None or cost[0] is None:
        return {"loop.cost.known": False}
    return {"loop.cost.known": True, "loop.cost": float(cost[0]), "loop.cost.currency": cost[1]}


def text_part(text: str) -> dict[str, str]:
    return {"type": "text", "content": text}


def messages(role: str, parts: list[dict[str, str]], finish_reason: str = "") -> str:
    """Messages as the conventions' gen_ai.input.messages / output.messages hold them (JSON)."""
    message: dict[str, Any] = {"role": role, "parts": parts}
    if finish_reason:
        message["finish_reason"] = finish_reason
    return json.dumps([message])
