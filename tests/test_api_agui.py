"""A run as AG-UI 1.0 events, through a real daphne and a real worker, read as an AG-UI client
would: every data line parsed by ag_ui.core's own Event union, the sequence checked against the
protocol. A run started with POST /api/v1/agui waits for a decision (an interrupt), is approved
through POST /api/v1/runs/{id}/approvals/{call_id}, and its stream goes on to RUN_FINISHED;
GET /runs/{id}/agui reads a whole run again; a resume entry decides a waiting call."""

from typing import Any

import pytest
from ag_ui.core import Event, EventType, RunFinishedEvent
from pydantic import TypeAdapter

from agent.models import AgentRun
from approvals.models import ApprovalPreference
from core.events import RunStatus
from tests.conftest import wait_for
from tests.sse_client import Sse, Stream

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


@pytest.fixture
def site(start_worker, start_daphne, workspaces, nothing_configured, alice):
    """Alice asks before code runs; the worker's mock model takes its time."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    start_worker(LOOP_MOCK_LATENCY_MS="300")
    return start_daphne(LOOP_API_POLL_SECONDS="0.5")


def run_input(thread: str, task: str = PRODUCT, **more: Any) -> dict[str, Any]:
    message = {"id": "m1", "role": "user", "content": task}
    return {"threadId": thread, "runId": "client-1", "messages": [message], **more}


def agui_events(messages) -> list[tuple[Sse, Any]]:
    """Each data line as the AG-UI event it is (ag_ui's own models validate it)."""
    return [(message, EVENTS.validate_json(message.data)) for message in messages if message.data]


def until(stream: Stream, stop) -> list[tuple[Sse, Any]]:
    """Read the stream's events up to the first that `stop` takes."""
    read = []
    for message in stream.messages():
        if message.data is None:
            continue
        read.append((message, EVENTS.validate_json(message.data)))
        if stop(read[-1][1]):
            return read
    raise AssertionError(f"The stream ended first: {[event.type for _, event in read]}")


def outcome(event: Any) -> str | None:
    if isinstance(event, RunFinishedEvent):
        return event.outcome.type if event.outcome else "success"
    return None


def obeys_the_protocol(events: list[Any]) -> None:
    """RUN_STARTED first, RUN_FINISHED last; every message and call opened, filled and closed
    in order within a run segment; a call's result after its end."""
    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type == EventType.RUN_FINISHED
    running, messages, calls = False, set(), {}
    for event in events:
        kind = event.type
        if kind == EventType.RUN_STARTED:
            assert not running
            running = True
            continue
        assert running, f"{kind} outside a run"
        if kind in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            assert not messages, "a message left open"
            assert "open" not in calls.values(), "a call left open"
            running = False
        elif kind == EventType.TEXT_MESSAGE_START:
            assert event.message_id not in messages
            messages.add(event.message_id)
        elif kind == EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in messages
        elif kind == EventType.TEXT_MESSAGE_END:
            messages.remove(event.message_id)
        elif kind == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in calls
            calls[event.tool_call_id] = "open"
        elif kind == EventType.TOOL_CALL_ARGS:
            assert calls[event.tool_call_id] == "open"
        elif kind == EventType.TOOL_CALL_END:
            assert calls[event.tool_call_id] == "open"
            calls[event.tool_call_id] = "ended"
        elif kind == EventType.TOOL_CALL_RESULT:
            assert calls[event.tool_call_id] == "ended"
            calls[event.tool_call_id] = "answered"
    assert not running


def written(events: list[Any]) -> dict[str, str]:
    """Each assistant message's text, as a client joins its content."""
    texts: dict[str, str] = {}
    for event in events:
        if event.type == EventType.TEXT_MESSAGE_CONTENT:
            texts[event.message_id] = texts.get(event.message_id, "") + event.delta
    return texts


def replies(run: AgentRun) -> dict[str, str]:
    """The run's stored replies with text, by the message id the stream gives them."""
    stored = run.events.filter(kind="model_replied").values_list("data", flat=True)
    return {f"run-{run.pk}-step-{data['step']}": data["text"] for data in stored if data["text"]}


def approve(site, key: str, run_id: str, interrupt: Any) -> None:
    import http.client
    import json

    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
    path = interrupt.metadata["loop"]["decide"]["path"]
    assert path == f"/api/v1/runs/{run_id}/approvals/{interrupt.id}"
    body = {"decision": "approve", "digest": interrupt.metadata["loop"]["digest"]}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    connection.request("POST", path, body=json.dumps(body), headers=headers)
    response = connection.getresponse()
    assert response.status == 200, response.read()
    connection.close()


def test_a_run_started_over_agui_waits_is_approved_and_finishes_in_one_stream(
    site, alice, alice_key
):
    stream = Stream.posted(site.port, "/api/v1/agui", alice_key, run_input("new"))
    assert stream.status == 200
    assert stream.header("Content-Type").startswith("text/event-stream")
    read = until(stream, lambda event: outcome(event) == "interrupt")
    started = read[0][1]
    assert started.type == EventType.RUN_STARTED
    assert started.protocol_version == "1.0"
    run = AgentRun.objects.get(pk=int(started.run_id))
    assert started.thread_id == str(run.conversation_id)
    assert run.status == RunStatus.AWAITING_APPROVAL
    (interrupt,) = read[-1][1].outcome.interrupts
    waiting = run.approvals.get()
    assert interrupt.id == interrupt.tool_call_id == waiting.call_id
    assert interrupt.metadata["loop"]["tool"] == "run_code"

    approve(site, alice_key, started.run_id, interrupt)
    read += until(stream, lambda event: outcome(event) == "success")
    stream.close()

    events = [event for _, event in read]
    obeys_the_protocol(events)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert events[-1].result["answer"] == run.answer
    assert [e.type for e in events].count(EventType.TOOL_CALL_RESULT) == 1
    assert written(events) == replies(run)  # pieces and stored replies: no text twice
    ids = [int(message.id) for message, _ in read if message.id is not None]
    assert ids == sorted(ids)
    assert set(ids) <= set(run.events.values_list("seq", flat=True))


def test_a_whole_run_is_read_again_as_agui_and_resumed_after_an_id(site, alice, alice_key):
    stream = Stream.posted(site.port, "/api/v1/agui", alice_key, run_input("new"))
    read = until(stream, lambda event: outcome(event) == "interrupt")
    stream.close()
    run_id = read[0][1].run_id
    approve(site, alice_key, run_id, read[-1][1].outcome.interrupts[0])
    run = AgentRun.objects.get(pk=int(run_id))
    wait_for(lambda: run.events.filter(kind="run_finished").exists(), "the run to end")

    whole = Stream(site.port, f"/api/v1/runs/{run_id}/agui", alice_key)
    events = [event for _, event in agui_events(whole.messages())]
    whole.close()
    obeys_the_protocol(events)
    run.refresh_from_db()
    assert outcome(events[-1]) == "success"
    assert events[-1].result["answer"] == run.answer
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text.endswith(run.answer)

    last = run.events.filter(kind="tool_call_finished").get().seq
    later = Stream(
        site.port, f"/api/v1/runs/{run_id}/agui", alice_key, **{"Last-Event-ID": str(last)}
    )
    resumed = agui_events(later.messages())
    later.close()
    assert all(int(message.id) > last for message, _ in resumed if message.id is not None)
    assert EventType.TOOL_CALL_RESULT not in [event.type for _, event in resumed]
    obeys_the_protocol([event for _, event in resumed])


def test_a_resume_entry_decides_the_waiting_call_and_streams_the_run_on(site, alice, alice_key):
    stream = Stream.posted(site.port, "/api/v1/agui", alice_key, run_input("new"))
    read = until(stream, lambda event: outcome(event) == "interrupt")
    stream.close()
    thread, interrupt = read[0][1].thread_id, read[-1][1].outcome.interrupts[0]

    entry = {"interruptId": interrupt.id, "status": "resolved", "payload": {"decision": "approve"}}
    resumed = Stream.posted(
        site.port, "/api/v1/agui", alice_key, run_input(thread, "", resume=[entry])
    )
    assert resumed.status == 200
    events = [event for _, event in agui_events(resumed.messages())]
    resumed.close()
    obeys_the_protocol(events)
    assert outcome(events[-1]) == "success"
    assert events[0].run_id == read[0][1].run_id


def test_another_persons_thread_and_run_are_404(site, alice_key, bob):
    from agent.runs import new_conversation, submit_run

    bobs = submit_run(bob, PRODUCT, new_conversation(bob), model="mock")
    refused = Stream(site.port, f"/api/v1/runs/{bobs.pk}/agui", alice_key)
    assert refused.status == 404
    assert refused.body()["error"]["code"] == "not_found"
    posted = Stream.posted(
        site.port, "/api/v1/agui", alice_key, run_input(str(bobs.conversation_id))
    )
    assert posted.status == 404
    assert posted.body()["error"]["code"] == "not_found"
    bad = Stream.posted(site.port, "/api/v1/agui", alice_key, {"threadId": "x"})
    assert bad.status == 422
    assert bad.body()["error"]["code"] == "invalid_request"
