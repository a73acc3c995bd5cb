"""Runs recorded before causes existed get the cause their error's wording meant (migration
agent/0009), on the run and on the end in its log, so every reader reads the cause alone."""

import importlib

import pytest
from django.apps import apps

from agent.models import AgentRun, RunEvent
from agent.runs import start_run
from core.events import EndCause, HaltReason, RunFinished, RunStatus

pytestmark = pytest.mark.django_db

migration = importlib.import_module("agent.migrations.0009_run_end_cause")

BEFORE = [  # status, halt reason, error as Loop wrote them, and the cause they meant
    (RunStatus.FAILED, "", "Model failed: Groq answered 503: overloaded", EndCause.MODEL_DOWN),
    (
        RunStatus.HALTED,
        HaltReason.DEADLINE,
        "The model provider did not answer in time: Groq did not answer.",
        EndCause.MODEL_TOO_SLOW,
    ),
    (RunStatus.FAILED, "", "Internal error: RuntimeError: bug", EndCause.INTERNAL_ERROR),
    (RunStatus.FAILED, "", "The run could not start: needs GROQ_API_KEY", EndCause.COULD_NOT_START),
    (
        RunStatus.FAILED,
        "",
        "The worker running this stopped 3 times while working it (last: w); Loop resumes a run "
        "at most 2 times (LOOP_MAX_RESUMES), so a run that brings its worker down cannot go on "
        "for ever.",
        EndCause.TOO_MANY_RESUMES,
    ),
    (RunStatus.HALTED, HaltReason.DEADLINE, "", None),  # its own time was up: no cause
    (RunStatus.CANCELLED, "", "", None),
]


def ended_before_causes(user, status, halt_reason, error) -> AgentRun:
    run = start_run(user, "a task", model="mock")
    AgentRun.objects.filter(pk=run.pk).update(status=status, halt_reason=halt_reason, error=error)
    end = RunFinished(status=status, answer="", halt_reason=halt_reason or None, error=error)
    data = end.as_dict()
    del data["cause"]  # as stored before causes
    RunEvent.objects.create(run=run, seq=1, kind=RunFinished.kind, data=data)
    return run


def test_the_migration_gives_each_run_and_its_logged_end_the_cause_its_words_meant(alice):
    runs = [ended_before_causes(alice, *before[:3]) for before in BEFORE]
    migration.causes_from_wording(apps, None)
    for run, (*_, cause) in zip(runs, BEFORE, strict=True):
        run.refresh_from_db()
        assert run.cause == (cause or "")
        assert run.events.get().event.cause == cause
        continues = cause is EndCause.MODEL_DOWN or run.status in ("halted", "cancelled")
        assert run.can_continue == continues


def test_an_end_logged_before_causes_still_loads(alice):
    [run] = [ended_before_causes(alice, RunStatus.SUCCEEDED, "", "")]
    assert "cause" not in run.events.get().data
    assert run.events.get().event == RunFinished(status=RunStatus.SUCCEEDED, answer="")
