"""A run a real `manage.py worker` parked on a decision, whose person's group took run_code away
while it waited: approved, the worker that takes it up again refuses the call (the model reads
why) and never runs it."""

import pytest

from agent.models import FINISHED, AgentRun
from agent.runs import new_conversation, submit_run
from approvals.decisions import decide
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from rights.models import GroupRights
from tests.conftest import wait_for
from tests.rights_helpers import group_with

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def test_a_tool_taken_away_while_a_run_waits_is_not_run_when_approved(alice, start_worker):
    coders = group_with("coders", alice, ask_before=["run_code"])
    start_worker()
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: status_of(run) == RunStatus.AWAITING_APPROVAL, "the run to wait")

    rights = GroupRights.objects.get(group=coders)
    rights.all_tools, rights.tool_names, rights.ask_before = False, ["read_file"], []
    rights.save()
    request = run.approvals.get(decision="")
    decide(alice, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])
    wait_for(lambda: status_of(run) in FINISHED, "the run to end")

    finished = run.events.filter(kind="tool_call_finished", data__tool="run_code")
    assert finished.exists()
    for event in finished:
        assert event.data["status"] == "error"
        assert event.data["text"].startswith("Your groups do not allow the tool run_code")
    assert "391" not in run.answer
