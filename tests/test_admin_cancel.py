"""An operator's Stop reaches a run worked in a process of its own (no job): the run's watcher
reads it from the database, in a thread of its own, so the Stop is committed, not only made in
the test's transaction."""

import pytest
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.runs import start_run
from core.events import ModelReplied, RunStatus
from core.interrupt import Interrupt
from engine.execution import execute_run

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = reverse("admin:agent_agentrun_changelist")


def watched_interrupts(monkeypatch) -> list[Interrupt]:
    """Every Interrupt the engine makes for a run from now on, to wait on in a test."""
    made: list[Interrupt] = []

    class Watched(Interrupt):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr("engine.execution.Interrupt", Watched)
    return made


def test_an_operator_cancels_a_running_run_and_it_stops_at_its_next_check(
    client, operator, alice, monkeypatch
):
    interrupts = watched_interrupts(monkeypatch)
    run = start_run(alice, "List my files", model="mock")

    def operator_cancels(event):
        if isinstance(event, ModelReplied):  # the model asked for a call: it must not run
            client.post(RUNS, {"action": "cancel_runs", "_selected_action": [run.pk]})
            assert interrupts[0].wait(5)  # the run's watcher heard it

    script = ScriptedLLM([call("list_files", {}), answer("never")])
    run = execute_run(run, llm=script, on_event=operator_cancels)
    assert run.status == RunStatus.CANCELLED
    assert run.cancel_requested_at is not None
