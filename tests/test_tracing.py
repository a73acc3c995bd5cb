"""OpenTelemetry traces of runs worked by real `manage.py worker` processes, exported over
OTLP/HTTP to a collector in the test's process (tests/otlp_collector.py): the span tree of a
run, its attributes and usage, no content unless the operator opts in, one trace across a
resume in another worker, a web request's caller linked, and a collector that is down."""

import json
import signal
import urllib.request
from collections.abc import Iterator, Sequence

import pytest

from accounting.models import Charge
from agent.models import AgentRun
from agent.observers import forget, observe
from agent.runs import cancel_run, continue_run, new_conversation, submit_run
from approvals.decisions import decide
from approvals.models import ApprovalPreference
from approvals.waiting import CallDecision
from core.events import Decision, Event, RunStatus
from tests.conftest import wait_for
from tests.otlp_collector import Collector, ReceivedSpan, running_collector
from tests.socket_harness import silent_server
from tracing.ids import attempt_span_id, run_trace_id

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "Compute the sum of 1..100 and save it to a file"
CONTENT = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
PRICES = json.dumps({"mock": {"input": 1.5, "output": 6, "currency": "EUR"}})


@pytest.fixture
def collector() -> Iterator[Collector]:
    with running_collector() as running:
        yield running


def traced(collector: Collector, **env: str) -> dict[str, str]:
    """A worker's environment exporting its spans to `collector` at once."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "LOOP_PRICES": PRICES,
        **env,
    }


def finished(run: AgentRun) -> AgentRun:
    wait_for(lambda: run_status(run) in {RunStatus.SUCCEEDED, RunStatus.HALTED}, "the run's end")
    return run


def run_status(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def attempts(collector: Collector, count: int) -> list[ReceivedSpan]:
    """The run's `invoke_agent` spans, once `count` of them and every span under them came."""
    wait_for(lambda: len(collector.named("invoke_agent")) >= count, "the run's attempt spans")
    return sorted(collector.named("invoke_agent"), key=lambda span: span.start)


def events_of(run: AgentRun, kind: str) -> list[dict]:
    return [event.data for event in run.events.filter(kind=kind).order_by("seq")]


def under(
    collector: Collector, parent: ReceivedSpan, prefix: str, count: int
) -> list[ReceivedSpan]:
    def children() -> list[ReceivedSpan]:
        return [s for s in collector.named(prefix) if s.parent_span_id == parent.span_id]

    wait_for(lambda: len(children()) >= count, f"{count} {prefix} spans")
    return sorted(children(), key=lambda span: span.attributes["loop.step"])


def test_a_run_is_one_invoke_agent_span_with_its_turns_and_tool_calls_beneath(
    alice, start_worker, collector
):
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    start_worker(**traced(collector))
    finished(run)
    replies = events_of(run, "model_replied")
    calls = events_of(run, "tool_call_finished")

    [agent] = attempts(collector, 1)
    turns = under(collector, agent, "chat ", len(replies))
    tools = under(collector, agent, "execute_tool ", len(calls))

    assert agent.name == "invoke_agent Loop"
    assert agent.parent_span_id == ""
    assert agent.trace_id == f"{run_trace_id(run.pk):032x}"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.system"] == "mock"  # the pinned v1.36.0's name
    assert "gen_ai.provider.name" not in agent.attributes
    assert agent.attributes["loop.run.id"] == run.pk
    assert agent.attributes["loop.run.status"] == "succeeded"
    assert agent.attributes["gen_ai.usage.input_tokens"] == run.prompt_tokens
    assert agent.attributes["gen_ai.usage.output_tokens"] == run.completion_tokens
    total = sum(charge.cost for charge in Charge.objects.filter(run_id=run.pk, kind="turn"))
    assert agent.attributes["loop.cost"] == float(total)
    assert agent.attributes["loop.cost.currency"] == "EUR"
    assert agent.schema_url == "https://opentelemetry.io/schemas/1.36.0"
    assert agent.resource["service.name"] == "loop"

    assert [t.name for t in turns] == ["chat mock"] * len(replies)
    assert {t.trace_id for t in turns + tools} == {agent.trace_id}
    charges = {c.step: c for c in Charge.objects.filter(run_id=run.pk, kind="turn")}
    for turn, reply in zip(turns, replies, strict=True):
        assert turn.attributes["gen_ai.operation.name"] == "chat"
        assert turn.attributes["gen_ai.request.model"] == "mock"
        assert turn.attributes["gen_ai.usage.input_tokens"] == reply["prompt_tokens"]
        assert turn.attributes["gen_ai.usage.output_tokens"] == reply["completion_tokens"]
        reason = "tool_call" if reply["tool_calls"] else "stop"
        assert turn.attributes["gen_ai.response.finish_reasons"] == [reason]
        assert turn.attributes["loop.cost"] == float(charges[reply["step"]].cost)
        assert turn.attributes["loop.cost.currency"] == "EUR"
        assert agent.start <= turn.start <= turn.end <= agent.end

    assert [(t.name, t.attributes["gen_ai.tool.call.id"]) for t in tools] == [
        (f"execute_tool {c['tool']}", c["call_id"]) for c in calls
    ]
    failed = [t for t in tools if t.status_code == 2]
    assert [t.attributes["gen_ai.tool.name"] for t in failed] == ["read_file"]
    assert failed[0].attributes["error.type"] == "error"

    spans = [agent, *turns, *tools]
    assert not [key for span in spans for key in span.attributes if key in CONTENT]
    assert not [s for s in spans for v in s.attributes.values() if "1..100" in str(v)]


def test_content_and_the_latest_conventions_only_when_the_operator_opts_in(
    alice, start_worker, collector
):
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    start_worker(
        **traced(
            collector,
            LOOP_TRACE_CONTENT="true",
            OTEL_SEMCONV_STABILITY_OPT_IN="http,gen_ai_latest_experimental",
        )
    )
    finished(run)
    calls = events_of(run, "tool_call_finished")

    [agent] = attempts(collector, 1)
    tools = under(collector, agent, "execute_tool ", len(calls))
    turns = under(collector, agent, "chat ", 1)

    assert agent.schema_url == "https://opentelemetry.io/schemas/1.37.0"
    assert agent.attributes["gen_ai.provider.name"] == "mock"
    assert "gen_ai.system" not in agent.attributes
    asked = json.loads(agent.attributes["gen_ai.input.messages"])
    assert asked == [{"role": "user", "parts": [{"type": "text", "content": TASK}]}]
    answered = json.loads(agent.attributes["gen_ai.output.messages"])
    assert answered[0]["parts"][0]["content"] == run.answer
    first_call = json.loads(turns[0].attributes["gen_ai.output.messages"])[0]["parts"][-1]
    assert first_call["type"] == "tool_call"
    assert first_call["arguments"] == calls[0]["arguments"]
    assert [t.attributes["gen_ai.tool.call.arguments"] for t in tools] == [
        c["arguments"] for c in calls
    ]
    assert [t.attributes["gen_ai.tool.call.result"] for t in tools] == [c["text"] for c in calls]
    assert "gen_ai.usage.cache_read.input_tokens" in turns[0].attributes


def test_a_run_continued_by_another_worker_stays_in_one_trace_linked_to_its_first_attempt(
    alice, start_worker, collector, settings
):
    settings.LOOP_MAX_ITERATIONS = 1  # it halts at the cap; a Continue goes on
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    # Exported only when the batch is full or the worker stops: what arrives was flushed at
    # the stop.
    first = start_worker(**traced(collector, OTEL_BSP_SCHEDULE_DELAY="600000"))
    wait_for(lambda: run_status(run) == RunStatus.HALTED, "the run to halt at its cap")
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    [halted] = attempts(collector, 1)
    assert halted.attributes["loop.run.status"] == "halted"
    assert halted.attributes["loop.run.halt_reason"] == "iteration_cap"

    continue_run(alice, run.pk)
    start_worker(**traced(collector))
    wait_for(lambda: run_status(run) not in {"queued", "running"}, "the continued run's end")
    earlier, later = attempts(collector, 2)

    assert later.trace_id == earlier.trace_id == f"{run_trace_id(run.pk):032x}"
    assert later.span_id == f"{attempt_span_id(run.pk, 2):016x}"
    assert later.attributes["loop.run.resume_reason"] == "continued"
    assert (earlier.trace_id, earlier.span_id, {"loop.link": "earlier_attempt"}) in later.links
    assert under(collector, later, "chat ", 1)[0].trace_id == earlier.trace_id


def test_a_run_started_by_a_web_request_links_to_the_callers_span(
    alice, alice_key, start_worker, start_daphne, collector
):
    site = start_daphne(**traced(collector))
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    request = urllib.request.Request(  # noqa: S310 (our own server)
        f"{site.url}/api/v1/runs",
        data=json.dumps({"task": "What is 17 * 23?", "model": "mock"}).encode(),
        headers={
            "Authorization": f"Bearer {alice_key}",
            "Content-Type": "application/json",
            "traceparent": f"00-{caller_trace}-{caller_span}-01",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (our server)
        run = AgentRun.objects.get(pk=json.loads(response.read())["id"])
    start_worker(**traced(collector))
    finished(run)

    [agent] = attempts(collector, 1)
    assert agent.trace_id == f"{run_trace_id(run.pk):032x}"  # the run's own trace
    assert (caller_trace, caller_span, {"loop.link": "request"}) in agent.links


def test_a_collector_that_never_answers_neither_holds_up_the_run_nor_its_worker_s_stop(
    alice, start_worker
):
    with silent_server() as port:
        run = submit_run(alice, TASK, new_conversation(alice), model="mock")
        # Each export waits up to 15 s for an answer that never comes: a run that waited for
        # its spans' export (about 8 of them) would not end within wait_for's bound.
        worker = start_worker(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_BSP_SCHEDULE_DELAY="50",
            OTEL_EXPORTER_OTLP_TIMEOUT="15",
        )
        finished(run)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    assert run.status == RunStatus.SUCCEEDED
    assert run.answer == AgentRun.objects.get(pk=run.pk).answer != ""
    assert worker.returncode == 0, output


def test_a_run_that_waits_for_a_decision_ends_its_attempt_and_goes_on_in_the_same_trace(
    alice, start_worker, collector
):
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    start_worker(**traced(collector))
    wait_for(lambda: run_status(run) == RunStatus.AWAITING_APPROVAL, "the run to wait")
    [waited] = attempts(collector, 1)
    assert waited.attributes["loop.run.status"] == "awaiting_approval"

    request = run.approvals.get(decision="")
    decide(alice, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])
    finished(run)
    earlier, decided = attempts(collector, 2)

    assert decided.trace_id == waited.trace_id == earlier.trace_id
    assert decided.attributes["loop.run.resume_reason"] == "decided"
    assert decided.attributes["loop.run.status"] == "succeeded"
    assert (waited.trace_id, waited.span_id, {"loop.link": "earlier_attempt"}) in decided.links
    [tool] = under(collector, decided, "execute_tool ", 1)
    assert tool.attributes["gen_ai.tool.name"] == "run_code"
    assert tool.status_code == 0


def test_observers_hear_every_recorded_event_not_only_a_working_run_s_steps(alice):
    """A queued run stopped is ended by the web process, not by a worker's step: its end is
    heard too (the traces, the metrics and the notifications all listen here)."""
    heard: list[tuple[int, str]] = []

    def listen(run: AgentRun, events: Sequence[Event]) -> None:
        heard.extend((run.pk, event.kind) for event in events)

    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    observe(listen)
    try:
        cancel_run(alice, run.pk)
    finally:
        forget(listen)
    assert heard == [(run.pk, "run_finished")]
