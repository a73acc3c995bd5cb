"""What the socket's read of a run's end draws, and in how many queries: the run's row, its
feedback and its conversation's sidebar icon come with one query beside the events' own."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agent.models import AgentRun, RunEvent, RunFeedback
from agent.runs import new_conversation, start_run
from chat.stream import read_unsent
from core.events import RunFinished, RunStatus

pytestmark = pytest.mark.django_db

DEMO = "What is 17 * 23?"


def ended(run: AgentRun) -> None:
    end = RunFinished(status=RunStatus.SUCCEEDED, answer="391")
    RunEvent.objects.create(run=run, seq=1, kind=end.kind, data=end.as_dict())
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, answer="391")


def test_a_run_s_end_is_read_with_its_feedback_and_its_conversation_s_last_status(alice):
    """The sidebar's icon is the conversation's latest run's (here a later one, queued), the
    feedback the run's own; two queries: the events, then the run with what the page redraws."""
    conversation = new_conversation(alice)
    run = start_run(alice, DEMO, model="mock", conversation=conversation)
    ended(run)
    RunFeedback.objects.create(run=run, rating="down")
    start_run(alice, "And 18 * 23?", model="mock", conversation=conversation)
    with CaptureQueriesContext(connection) as queries:
        read = read_unsent.func(alice, run.pk, 0)
    sent = "".join(read.frames)
    assert len(queries.captured_queries) == 2
    assert f'id="conversation-{conversation.pk}-status"' in sent
    assert "status-queued" in sent
    assert "status-succeeded" not in sent.split("conversation-")[1]
    assert 'value="down" class="thumb" aria-pressed="true"' in sent
    assert read.last == 1


def test_a_run_s_end_without_feedback_offers_both_thumbs(alice):
    run = start_run(alice, DEMO, model="mock", conversation=new_conversation(alice))
    ended(run)
    sent = "".join(read_unsent.func(alice, run.pk, 0).frames)
    assert 'aria-pressed="true"' not in sent
    assert 'value="up" class="thumb" aria-pressed="false"' in sent
    assert "status-succeeded" in sent


def test_another_person_s_run_s_end_is_not_read(alice, bob):
    run = start_run(alice, DEMO, model="mock", conversation=new_conversation(alice))
    ended(run)
    read = read_unsent.func(bob, run.pk, 0)
    assert read.frames == []
    assert read.last == 0


def test_a_run_that_ends_between_the_reads_of_its_events_and_its_row_loses_no_event(
    alice, monkeypatch
):
    """The first read of the log finds nothing; the run's end and its last event are stored
    before its row is read (they are stored together): the log is read again, and the page gets
    the end, not a finished marker without it."""
    from agent import selectors

    run = start_run(alice, DEMO, model="mock", conversation=new_conversation(alice))
    ended(run)
    real = selectors.events_of_run_of
    reads: list[int] = []

    def before_the_end(user, run_id, **kwargs):
        reads.append(run_id)
        return [] if len(reads) == 1 else real(user, run_id, **kwargs)

    monkeypatch.setattr(selectors, "events_of_run_of", before_the_end)

    read = read_unsent.func(alice, run.pk, 0)

    assert read.last == 1
    assert "status-succeeded" in "".join(read.frames)
