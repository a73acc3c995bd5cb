"""api/follow.py's read of a run's log: a run seen finished with nothing new is read once more,
since its last events and its end may have been stored between the read of its events and the
read of its status (they are stored together, so nothing comes after a status seen finished)."""

import pytest

from agent import selectors
from agent.runs import new_conversation, start_run
from api import follow
from core.events import RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db


def test_a_run_that_ends_between_the_two_reads_loses_none_of_its_last_events(alice, monkeypatch):
    run = execute_run(
        start_run(alice, "2 + 2?", model="mock", conversation=new_conversation(alice))
    )
    assert run.status == RunStatus.SUCCEEDED
    stored = selectors.events_of_run_of(alice, run.pk)
    real = selectors.events_of_run_of
    reads = []

    def as_before_the_end(person, run_id, **kwargs):
        """The first read happens before the run's last events and its end are stored."""
        reads.append(kwargs)
        return [] if len(reads) == 1 else real(person, run_id, **kwargs)

    monkeypatch.setattr(selectors, "events_of_run_of", as_before_the_end)

    events, status = follow.read.func(alice, run.pk, 0)

    assert [logged.seq for logged in events] == [logged.seq for logged in stored]
    assert status == ""
