"""Every reader of a run's log draws every event type through the typed events: the chat's card,
the console's timeline and gist, and runagent's transcript. A new event type fails here until each
reader draws it (and a sample of it is added)."""

import dataclasses
from datetime import UTC, datetime

import pytest
from django.template.loader import render_to_string

from agent.models import RunEvent
from agent.runs import new_conversation, start_run
from chat.rendering import card_for, render_card
from chat.stream import read_unsent
from console import selectors
from core.events import (
    EVENT_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    ContinuedBy,
    Decision,
    Event,
    HaltReason,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    ResumeReason,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    event_from_dict,
)
from core.llm import ToolCall
from core.recalled import RecalledMemory
from core.results import ToolStatus
from core.wording import TOOL_SYMBOLS
from engine.management.commands.runagent import describe

DEMO = "Compute the sum of 1..100 and save it to a file"
RUN_ID = 3
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CALL = {"step": 2, "call_id": "call_1", "tool": "run_code", "arguments": '{"code": "print(1)"}'}
SAMPLES: list[Event] = [
    RunStarted(
        task=DEMO,
        provider="mock",
        model="mock",
        messages=[{"role": "user", "content": DEMO}],
        limits={"max_iterations": 2},
    ),
    MemoriesRecalled(
        memories=[RecalledMemory(id=1, text="a fact", score=0.5, parts={"similarity": 0.5})],
    ),
    ModelReplied(
        step=1,
        text="Let me compute it.",
        tool_calls=[ToolCall(id="call_1", name="run_code", arguments="{}")],
        prompt_tokens=10,
        completion_tokens=5,
    ),
    ToolCallStarted(**CALL),
    ToolCallFinished(**CALL, status=ToolStatus.OK, text="1\n", duration=0.01, policy="no network"),
    BreakerTripped(
        step=2,
        tool="run_code",
        reason=HaltReason.TOOL_FAILURES,
        failures=[{"tool": "run_code", "text": "ERROR: x"}],
    ),
    RunHalted(
        step=3,
        reason=HaltReason.ITERATION_CAP,
        detail="It reached 2 model turns.",
        summary_prompt="Sum.",
    ),
    RunFinished(
        status=RunStatus.HALTED,
        answer="What I did so far.",
        halt_reason=HaltReason.ITERATION_CAP,
        iterations=2,
    ),
    RunResumed(attempt=2, reason=ResumeReason.WORKER_LOST, lost_worker="host:123"),
    RunResumed(attempt=3, reason=ResumeReason.HANDED_BACK, lost_worker="host:124"),
    RunResumed(
        attempt=4, reason=ResumeReason.CONTINUED, note="Go on.", limits={"max_iterations": 4}
    ),
    PersonSaid(step=2, message=11, text="Save it as total.txt instead."),
    ApprovalRequested(**CALL, digest="d" * 64, why="The site asks before every run_code call."),
    ApprovalDecided(
        step=2,
        call_id="call_1",
        tool="run_code",
        decision=Decision.EDIT,
        arguments='{"code": "print(2)"}',
        by="alice",
    ),
]
INTERRUPTED = ToolCallFinished(
    **CALL,
    status=ToolStatus.INTERRUPTED,
    text="INTERRUPTED: the worker running this call stopped; it is unknown whether it completed",
    duration=0.0,
)
# The task shows as the person's own bubble, not as a card; a trip and a halt show in the run's
# end, its one banner (chat.rendering.end_banner).
UNDRAWN = (RunStarted, BreakerTripped, RunHalted)
RESUMED_IN_CHAT = {
    ResumeReason.WORKER_LOST: "Resumed: the worker running this stopped",
    ResumeReason.HANDED_BACK: "Resumed: the worker running this was stopped and handed it back",
    ResumeReason.DATABASE_RESTARTED: "Resumed: the database restarted while this ran",
    ResumeReason.CONTINUED: "Continued: you asked it to go on",
    ResumeReason.DECIDED: "Resumed: the calls it waited on were decided",
}


def timeline_html(seq: int, event: Event) -> str:
    entry = selectors.entry_for(seq, event, AT)
    return render_to_string(
        "admin/agent/agentrun/timeline.html", {"timeline": [entry], "stored_memories": []}
    )


def test_the_samples_cover_every_event_type():
    """A new event type fails here until each reader draws it (and a sample is added)."""
    assert {event.kind for event in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", [*SAMPLES, INTERRUPTED], ids=lambda event: event.kind)
def test_a_sample_is_what_its_stored_form_loads_as(event):
    """The readers below take each sample as the log gives it back."""
    assert event_from_dict(event.kind, event.as_dict()) == event


@pytest.mark.parametrize("event", [*SAMPLES, INTERRUPTED], ids=lambda event: event.kind)
def test_the_chat_the_console_and_the_terminal_each_draw_every_event(event):
    card = card_for(RUN_ID, 7, event)
    if isinstance(event, UNDRAWN):
        assert card is None
    else:
        assert card is not None
        assert render_card(card).strip().startswith("<")
    console = timeline_html(7, event)
    assert 'id="event-7"' in console
    assert "loop-unknown" not in console  # not the raw data a kind without a view falls back to
    assert selectors.gist(event)
    assert describe(event, RUN_ID)


@pytest.mark.parametrize("reason", list(ResumeReason))
def test_each_resume_reads_plainly_in_every_reader(reason):
    event = RunResumed(attempt=3, reason=reason, lost_worker="host:9")
    card = render_card(card_for(RUN_ID, 5, event))
    assert RESUMED_IN_CHAT[reason] in card
    assert 'class="card banner marker' in card
    console = RESUMED_IN_CHAT[reason].replace("you asked", "the owner or an operator asked")
    assert console in selectors.gist(event)
    assert describe(event, RUN_ID) == [f"{RESUMED_IN_CHAT[reason]} (attempt 3)."]


@pytest.mark.parametrize(
    ("stored", "by", "to_the_console", "to_the_owner"),
    [
        ("owner", ContinuedBy.OWNER, "the owner", "you"),
        ("operator", ContinuedBy.OPERATOR, "an operator", "an operator"),
        ("", None, "the owner or an operator", "you"),  # a log from before Loop recorded it
        ("delegate", "delegate", "the owner or an operator", "you"),  # a later Loop's word
    ],
)
def test_who_continued_a_run_is_read_as_its_member_and_stored_as_it_was(
    stored, by, to_the_console, to_the_owner
):
    event = event_from_dict("run_resumed", {"attempt": 2, "reason": "continued", "by": stored})
    assert isinstance(event, RunResumed)
    assert event.by == by
    assert isinstance(event.by, ContinuedBy) == isinstance(by, ContinuedBy)
    assert event.as_dict()["by"] == stored
    console, owners = (
        f"Continued: {who} asked it to go on" for who in (to_the_console, to_the_owner)
    )
    assert console in selectors.gist(event)
    assert owners in render_card(card_for(RUN_ID, 5, event))
    assert describe(event, RUN_ID) == [f"{owners} (attempt 2)."]


def test_an_interrupted_tool_call_is_drawn_as_a_failure_of_its_own():
    failed = dataclasses.replace(INTERRUPTED, status=ToolStatus.ERROR, text="ERROR: boom")
    cards = [card_for(RUN_ID, 9, event) for event in (INTERRUPTED, failed)]
    interrupted, error = (card.data for card in cards)
    assert (interrupted["icon"], interrupted["label"]) == (
        TOOL_SYMBOLS[ToolStatus.INTERRUPTED],
        "Interrupted",
    )
    assert (error["icon"], error["label"]) == (TOOL_SYMBOLS[ToolStatus.ERROR], "Error")
    html = render_card(cards[0])
    assert "status-interrupted" in html
    assert "INTERRUPTED: the worker running this call stopped" in html
    [line] = describe(INTERRUPTED, RUN_ID)
    assert line.startswith("        run_code interrupted in 0.000s: INTERRUPTED: the worker")
    assert "interrupted" in selectors.FAILED_TOOL_STATUSES


@pytest.mark.django_db
def test_events_a_later_loop_wrote_leave_the_chat_s_page_and_socket_standing(client, alice):
    """A kind, or a field, this version does not know (a later Loop's worker wrote it) draws no
    card; the page still shows the rest, and the socket's catch-up still gets past it."""
    run = start_run(alice, DEMO, model="mock", conversation=new_conversation(alice))
    reply = SAMPLES[2].as_dict() | {"confidence": 0.9}
    stored = [
        ("run_paused", {"why": "a later Loop's event"}),
        ("model_replied", reply),
        ("run_finished", SAMPLES[7].as_dict()),
    ]
    for seq, (kind, data) in enumerate(stored, start=1):
        RunEvent.objects.create(run=run, seq=seq, kind=kind, data=data)
    client.force_login(alice)
    page = client.get(f"/c/{run.conversation_id}/")
    assert page.status_code == 200
    assert f'id="ev-{run.pk}-3"' in page.text  # the end, which this version reads
    assert f'id="ev-{run.pk}-1"' not in page.text
    assert f'id="ev-{run.pk}-2"' not in page.text
    read = read_unsent.func(alice, run.pk, 0)
    assert read.last == 3
    assert f'id="ev-{run.pk}-3"' in "".join(read.frames)
    text = client.get(f"/runs/{run.pk}/events/2/text/")
    assert text.status_code == 404
