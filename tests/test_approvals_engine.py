"""Calls that wait for a person's decision, through the engine in this process (jobs worked by
work_job, the real sandbox, the embedded PostgreSQL): a waiting run holds no job, a decision and
the run's return to the queue are one transaction, each decided call runs once, a decision is
bound to its call and its person, Stop and expiry end a waiting run without running its calls.

Real worker processes (a slot freed while a run waits, a worker killed while it waits) are
tests/test_approvals_worker.py's."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.models import AgentRun
from agent.runs import cancel_run, continue_run, new_conversation, submit_run
from approvals.decisions import DecisionRefused, decide, expire_waiting
from approvals.models import ApprovalPreference, ApprovalRequest, ToolGrant
from approvals.policy import policy_for
from approvals.waiting import CallDecision
from core.approval import digest
from core.events import Decision, HaltReason, ResumeReason, RunStatus
from core.state import replay
from engine.execution import JobOutcome, tool_context, work_job, worked_seconds

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer


@pytest.fixture(autouse=True)
def code_asks(settings, workspaces):
    settings.LOOP_APPROVAL = "run_code=ask"


def worked(run: AgentRun) -> RunStatus | JobOutcome:
    run.refresh_from_db()
    return work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)


def waiting_run(user, task: str = PRODUCT) -> tuple[AgentRun, ApprovalRequest]:
    run = submit_run(user, task, new_conversation(user), model="mock")
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    return run, run.approvals.get(decision="")


def approve(user, run: AgentRun, request: ApprovalRequest, **changes) -> None:
    decision = CallDecision(request.call_id, Decision.APPROVE, request.digest)
    decide(user, run.pk, [CallDecision(**{**decision.__dict__, **changes})])


def snippets_run(run: AgentRun) -> int:
    """The calls that started: a call not let run never starts."""
    return run.events.filter(kind="tool_call_started").count()


def test_a_call_that_asks_parks_the_run_with_no_job_and_nothing_run(alice):
    run, request = waiting_run(alice)
    assert (run.status, run.job_id, run.worker) == (RunStatus.AWAITING_APPROVAL, None, "")
    assert request.tool == "run_code"
    assert request.digest == digest("run_code", request.arguments)
    assert request.why == "The site asks before every run_code call."
    assert snippets_run(run) == 0
    kinds = list(run.events.values_list("kind", flat=True))
    assert kinds[-2:] == ["model_replied", "approval_requested"]


def test_approved_the_run_is_queued_resumes_and_runs_the_call_exactly_once(alice):
    run, request = waiting_run(alice)
    approve(alice, run, request)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    # before new runs: its person waits on it
    assert ProcrastinateJob.objects.get(id=run.job_id).priority > 0
    assert worked(run) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert run.answer == "17 * 23 = 391"
    assert snippets_run(run) == 1
    resumed = run.events.get(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.DECIDED
    request.refresh_from_db()
    assert (request.decision, request.decided_by) == (Decision.APPROVE, alice)


def test_each_call_of_a_long_run_asks_and_runs_once(alice):
    run, request = waiting_run(alice, "Count slowly to 2")
    approve(alice, run, request)
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    second = run.approvals.get(decision="")
    assert second.call_id != request.call_id
    approve(alice, run, second)
    assert worked(run) == RunStatus.SUCCEEDED
    calls = list(run.tool_executions.values_list("call_id", flat=True))
    assert len(calls) == len(set(calls)) == 2


def test_an_edit_runs_the_persons_arguments_and_an_invalid_one_changes_nothing(alice):
    run, request = waiting_run(alice)
    with pytest.raises(DecisionRefused, match="do not fit run_code"):
        approve(alice, run, request, decision=Decision.EDIT, arguments='{"code": 5}')
    with pytest.raises(DecisionRefused, match="not valid JSON"):
        approve(alice, run, request, decision=Decision.EDIT, arguments="print(1)")
    request.refresh_from_db()
    assert request.waiting
    edited = json.dumps({"code": "print(6 * 7)"})
    approve(alice, run, request, decision=Decision.EDIT, arguments=edited)
    assert worked(run) == RunStatus.SUCCEEDED
    execution = run.tool_executions.get()
    assert json.loads(execution.arguments) == {"code": "print(6 * 7)"}
    assert "--- stdout ---\n42\n" in execution.result
    finished = run.events.get(kind="tool_call_finished")
    assert finished.data["edited"] is True


def test_a_denial_never_runs_the_call_and_the_model_reads_the_reason(alice):
    run, request = waiting_run(alice)
    approve(alice, run, request, decision=Decision.DENY, reason="not now")
    assert worked(run) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert snippets_run(run) == 0
    assert "You declined the call to run_code: not now" in run.answer  # it read the reason
    [execution] = run.tool_executions.all()
    assert execution.status == "denied"


@pytest.mark.parametrize(
    "tampered",
    [
        {"digest": digest("run_code", '{"code": "import os"}')},  # another call's digest
        {"call_id": "call_of_my_own"},  # a call of the client's making
        {"decision": Decision.EXPIRED},  # not a person's decision
    ],
)
def test_a_decision_not_bound_to_the_waiting_call_is_refused_and_changes_nothing(alice, tampered):
    run, request = waiting_run(alice)
    with pytest.raises(DecisionRefused):
        approve(alice, run, request, **tampered)
    request.refresh_from_db()
    run.refresh_from_db()
    assert (request.decision, run.status) == ("", RunStatus.AWAITING_APPROVAL)
    assert not run.events.filter(kind="approval_decided").exists()


def test_a_call_is_decided_once_and_another_person_cannot_decide_it(alice, bob):
    run, request = waiting_run(alice)
    with pytest.raises(AgentRun.DoesNotExist):
        approve(bob, run, request)
    approve(alice, run, request, decision=Decision.DENY)
    with pytest.raises(DecisionRefused, match="decided already"):
        approve(alice, run, request)
    assert run.events.filter(kind="approval_decided").count() == 1


def test_stop_on_a_waiting_run_ends_it_cancelled_with_a_valid_transcript(alice):
    run, request = waiting_run(alice)
    cancel_run(alice, run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    request.refresh_from_db()
    assert request.decision == Decision.CANCELLED
    [execution] = run.tool_executions.all()
    assert (execution.status, execution.call_id) == ("skipped", request.call_id)
    state = replay(event.event for event in run.events.order_by("seq"))
    tool_results = [m for m in state.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_results] == [request.call_id]
    with pytest.raises(DecisionRefused, match="decided already"):
        approve(alice, run, request)


def test_a_stop_recorded_between_a_decision_and_the_claim_keeps_the_approved_call_from_running(
    alice,
):
    """The decision queued the run again; a Stop recorded before a worker claims it (the
    Stop's first step, agent.runs.record_stop) is read by the claim: the approved call never
    starts, and the run ends cancelled, the call answered as not run."""
    run, request = waiting_run(alice)
    approve(alice, run, request)
    AgentRun.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())

    assert worked(run) == RunStatus.CANCELLED
    assert snippets_run(run) == 0
    request.refresh_from_db()
    assert request.decision == Decision.APPROVE  # decided, and never run for the Stop
    [execution] = run.tool_executions.all()
    assert (execution.call_id, execution.status) == (request.call_id, "skipped")
    assert list(run.events.values_list("kind", flat=True))[-2:] == [
        "tool_call_finished",
        "run_finished",
    ]


def test_a_wait_past_its_limit_halts_the_run_never_runs_the_call_and_continue_asks_again(
    alice, settings
):
    run, request = waiting_run(alice)
    settings.LOOP_APPROVAL_SECONDS = 60
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - timedelta(seconds=61)
    )
    assert expire_waiting() == 1
    run.refresh_from_db()
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, HaltReason.NO_DECISION)
    assert snippets_run(run) == 0
    request.refresh_from_db()
    assert (request.decision, request.decided_by) == (Decision.EXPIRED, None)
    continue_run(alice, run.pk)
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    again = run.approvals.get(decision="")
    assert again.pk != request.pk


def test_a_wait_within_its_limit_is_left_alone(alice, settings):
    run, _ = waiting_run(alice)
    settings.LOOP_APPROVAL_SECONDS = 3600
    assert expire_waiting() == 0
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL


def test_the_time_a_run_waited_for_a_decision_is_not_worked_time():
    start = timezone.now()
    rows = [
        ("run_started", start),
        ("approval_requested", start + timedelta(seconds=2)),
        ("approval_decided", start + timedelta(hours=5)),
        ("run_resumed", start + timedelta(hours=5, seconds=1)),
        ("run_finished", start + timedelta(hours=5, seconds=4)),
    ]
    assert worked_seconds(rows) == pytest.approx(5.0)


def test_always_allow_lifts_the_persons_own_ask_but_never_the_sites(alice, settings):
    settings.LOOP_APPROVAL = ""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    run, request = waiting_run(alice)
    assert request.why == "You asked to decide before run_code runs."
    approve(alice, run, request, always=True)
    assert ToolGrant.objects.filter(conversation=run.conversation, tool="run_code").exists()
    policy = policy_for(run, tool_context(run))
    assert policy.why("run_code") is None
    settings.LOOP_APPROVAL = "run_code=ask"
    assert policy_for(run, tool_context(run)).why("run_code") is not None
    assert worked(run) == RunStatus.SUCCEEDED


def test_always_allow_of_a_tool_the_site_asks_about_is_refused(alice):
    run, request = waiting_run(alice)
    with pytest.raises(DecisionRefused, match="cannot be always allowed"):
        approve(alice, run, request, always=True)
    request.refresh_from_db()
    assert request.waiting


def test_write_file_asks_only_when_the_write_would_change_the_file(alice, settings):
    settings.LOOP_APPROVAL = "write_file=ask"
    run = submit_run(alice, "Save 'hello' to greeting.txt", new_conversation(alice), model="mock")
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    approve(alice, run, run.approvals.get())
    assert worked(run) == RunStatus.SUCCEEDED
    again = submit_run(alice, "Save 'hello' to greeting.txt", new_conversation(alice), model="mock")
    assert worked(again) == RunStatus.SUCCEEDED  # the same text there already: nothing to ask
    assert not again.approvals.exists()


def test_the_minutes_periodic_task_expires_waits(alice, settings):
    from asgiref.sync import async_to_sync
    from procrastinate.contrib.django import app

    from engine.tasks import expire_waiting_calls

    _, request = waiting_run(alice)
    settings.LOOP_APPROVAL_SECONDS = 1
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - timedelta(seconds=2)
    )
    assert async_to_sync(expire_waiting_calls.func)(timestamp=0) == 1
    periodic = {task.periodic_id for task in app.periodic_registry.periodic_tasks.values()}
    assert "expire_waiting_calls" in periodic


def test_the_consoles_timeline_says_who_decided_what(alice, client, operator):
    run, request = waiting_run(alice)
    edited = json.dumps({"code": "print(1)"})
    approve(alice, run, request, decision=Decision.EDIT, arguments=edited)
    worked(run)
    page = client.get(f"/admin/agent/agentrun/{run.pk}/change/").content.decode()
    assert "waits for its person's decision: The site asks before every run_code call." in page
    assert "Run with the arguments the person gave:" in page


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("run_code=ask,write_file=ask", []),
        ("run_code=maybe", ["agent.E010"]),
        ("run_cod=ask", ["agent.W010"]),
    ],
)
def test_loop_approval_is_checked_at_start(settings, configured, expected):
    from approvals.checks import check_approval_policy

    settings.LOOP_APPROVAL = configured
    assert [message.id for message in check_approval_policy()] == expected


def test_a_replys_waiting_calls_are_listed_in_the_models_order_and_where_each_was_decided(
    alice,
):
    from agent.llm.scripted import ScriptedLLM, answer, calls
    from agent.runs import start_run
    from engine.execution import execute_run

    codes = [("run_code", {"code": f"print({n})"}) for n in range(5)]
    llm = ScriptedLLM([calls(*codes), answer("printed")])
    run = execute_run(start_run(alice, "print five", model="mock"), llm=llm)
    assert run.status == RunStatus.AWAITING_APPROVAL
    waiting = list(run.approvals.all())
    assert [json.loads(r.arguments)["code"] for r in waiting] == [f"print({n})" for n in range(5)]
    assert [w.call_id for w in waiting] == [
        e.data["call_id"] for e in run.events.filter(kind="approval_requested").order_by("seq")
    ]
    decide(
        alice,
        run.pk,
        [CallDecision(r.call_id, Decision.APPROVE, r.digest) for r in waiting],
        queue_it=False,
        via="terminal",
    )
    assert set(run.approvals.values_list("decided_via", flat=True)) == {"terminal"}
    run = execute_run(run, llm=llm)
    assert run.status == RunStatus.SUCCEEDED
    outputs = [
        e.data["text"].split("--- stdout ---\n")[1].split("\n")[0]
        for e in run.events.filter(kind="tool_call_finished").order_by("seq")
    ]
    assert outputs == [str(n) for n in range(5)]


def test_always_allow_in_a_run_outside_any_conversation_is_refused_with_the_reason(alice):
    from agent.runs import start_run
    from engine.execution import execute_run

    run = execute_run(start_run(alice, PRODUCT, model="mock"))
    request = run.approvals.get()
    with pytest.raises(DecisionRefused, match="belongs to no conversation"):
        approve(alice, run, request, always=True)
    request.refresh_from_db()
    assert request.waiting
