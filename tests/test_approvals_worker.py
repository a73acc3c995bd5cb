"""Calls that wait for a person's decision, worked by real `manage.py worker` processes: a
waiting run holds no worker slot (a worker at concurrency 1 works another person's run
meanwhile), the recovery leaves it alone, and a worker killed while the run waits changes
nothing: a decision made while no worker runs is taken by the next one, the call run once."""

import pytest
from asgiref.sync import async_to_sync
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.models import AgentRun
from agent.runs import new_conversation, submit_run
from approvals.decisions import decide
from approvals.models import ApprovalPreference
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from engine.tasks import recover_runs
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def waits(run: AgentRun) -> bool:
    return status_of(run) == RunStatus.AWAITING_APPROVAL


def approve(run: AgentRun) -> None:
    request = run.approvals.get(decision="")
    decide(run.user, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])


def calls_started(run: AgentRun) -> int:
    return run.events.filter(kind="tool_call_started").count()


@pytest.fixture
def alice_asks(alice):
    """Alice asked to decide before code runs; nobody else did, and the site asks nothing."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    return alice


def test_a_waiting_run_holds_no_slot_the_worker_works_another_meanwhile(
    alice_asks, bob, start_worker
):
    start_worker("--concurrency", "1")
    waiting = submit_run(alice_asks, PRODUCT, new_conversation(alice_asks), model="mock")
    wait_for(lambda: waits(waiting), "alice's run to wait for her decision")

    other = submit_run(bob, PRODUCT, new_conversation(bob), model="mock")
    wait_for(lambda: status_of(other) == RunStatus.SUCCEEDED, "bob's run, on the one slot")
    assert async_to_sync(recover_runs.func)(timestamp=0) == 0
    assert waits(waiting)
    assert calls_started(waiting) == 0

    approve(waiting)
    wait_for(lambda: status_of(waiting) == RunStatus.SUCCEEDED, "alice's run, once approved")
    assert waiting.answer == "17 * 23 = 391"
    assert calls_started(waiting) == 1


def test_a_worker_killed_while_a_run_waits_changes_nothing_and_the_next_takes_the_decision(
    alice_asks, start_worker
):
    first = start_worker()
    run = submit_run(alice_asks, PRODUCT, new_conversation(alice_asks), model="mock")
    wait_for(lambda: waits(run), "the run to wait for a decision")
    first.kill()
    first.communicate(timeout=60)

    assert waits(run)
    approve(run)  # while no worker runs
    assert status_of(run) == RunStatus.QUEUED
    assert ProcrastinateJob.objects.filter(id=run.job_id, status="todo").exists()

    start_worker()
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the next worker to take it up")
    assert calls_started(run) == 1
    assert run.tool_executions.count() == 1
    assert list(run.events.filter(kind="run_resumed").values_list("data__reason", flat=True)) == [
        "decided"
    ]
