"""A call's deadline is kept where it is decided (issue 39 §2): a decision after
LOOP_APPROVAL_SECONDS is refused whoever makes it (the person's service call, the chat's Approve
button, an operator, `runagent --resume --yes`) and whenever the periodic expiry last ran, and
the run ends exactly as that expiry ends it; the call never runs. Time is moved by setting the
request's `created_at` into the past, never by waiting. The mock answers "Save 'hello' to
greeting.txt" with one write_file call, which the site asks about: a call that ran leaves the
file."""

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agent.models import AgentRun
from agent.runs import continue_run, new_conversation, queue, start_run, submit_run
from approvals.decisions import (
    DecisionRefused,
    decide,
    decide_as_operator,
    expire_waiting,
)
from approvals.models import ApprovalRequest
from approvals.selectors import waiting_for
from approvals.waiting import CallDecision
from core.approval import EXPIRED_TEXT
from core.events import Decision, HaltReason, RunStatus
from engine.execution import JobOutcome, work_job
from tests.conftest import PROJECT_DIR, child_environment, wait_for
from workspace.directory import workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "Save 'hello' to greeting.txt"
SECONDS = 45  # the setting
EXPIRED = "This request expired at"
HTMX = {"HTTP_HX_REQUEST": "true"}
TERMINAL_AGAIN = "Whoever started this run at a terminal can resume it there to be asked again."


@pytest.fixture(autouse=True)
def writes_ask(settings, workspaces):
    settings.LOOP_APPROVAL = "write_file=ask"
    settings.LOOP_APPROVAL_SECONDS = SECONDS


def worked(run: AgentRun) -> RunStatus | JobOutcome:
    run.refresh_from_db()
    return work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)


def waiting_run(user) -> tuple[AgentRun, ApprovalRequest]:
    run = submit_run(user, TASK, new_conversation(user), model="mock")
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    return run, run.approvals.get(decision="")


def asked_ago(request: ApprovalRequest, seconds: float) -> None:
    """The call was asked about `seconds` ago (its deadline moves with it)."""
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


def approval(request: ApprovalRequest, decision: Decision = Decision.APPROVE) -> CallDecision:
    return CallDecision(request.call_id, decision, request.digest)


def written(user) -> bool:
    return (workspace_path(user.pk) / "greeting.txt").exists()


def ended_expired(run: AgentRun, request: ApprovalRequest) -> None:
    """The run ended as the periodic expiry ends it, the call recorded as never run."""
    run.refresh_from_db()
    request.refresh_from_db()
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, HaltReason.NO_DECISION)
    assert (request.decision, request.decided_by) == (Decision.EXPIRED, None)
    [execution] = run.tool_executions.all()
    assert (execution.status, execution.error) == ("skipped", EXPIRED_TEXT)
    assert not run.events.filter(kind="tool_call_started").exists()


@pytest.mark.parametrize("late_by", [1, 6, 10.8, 11])  # the 46, 51, 55.8 and 56 s
@pytest.mark.parametrize("decision", [Decision.APPROVE, Decision.DENY])
def test_a_decision_after_the_deadline_is_refused_and_the_call_never_runs(alice, decision, late_by):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS + late_by)
    with pytest.raises(
        DecisionRefused,
        match=f"{EXPIRED} .*: nobody decided within 45 seconds, so the write_file call did not run",
    ):
        decide(alice, run.pk, [approval(request, decision)])
    ended_expired(run, request)
    assert not run.events.filter(kind="approval_decided", data__by="alice").exists()
    assert expire_waiting() == 0  # nothing left for the periodic task
    assert not written(alice)


def test_an_operators_decision_after_the_deadline_is_refused(alice, operator):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS + 1)
    with pytest.raises(DecisionRefused, match=EXPIRED):
        decide_as_operator(operator, run.pk, [approval(request)])
    ended_expired(run, request)
    assert not written(alice)


def test_a_late_decision_ends_the_run_exactly_as_the_periodic_expiry_does(alice):
    swept, swept_request = waiting_run(alice)
    refused, refused_request = waiting_run(alice)
    asked_ago(swept_request, SECONDS + 1)
    assert expire_waiting() == 1
    asked_ago(refused_request, SECONDS + 1)
    with pytest.raises(DecisionRefused, match=EXPIRED):
        decide(alice, refused.pk, [approval(refused_request)])
    assert ended_the_same(swept) == ended_the_same(refused)
    for run in (swept, refused):
        continue_run(alice, run.pk)
        assert worked(run) == JobOutcome.AWAITING_APPROVAL
    assert ended_the_same(swept) == ended_the_same(refused)


def ended_the_same(run: AgentRun) -> tuple[object, ...]:
    """How the run ended, as its log (kinds, the halt's words), its row and its audit rows say:
    the same whether the sweep or a late decision ended it."""
    run.refresh_from_db()
    events = list(run.events.order_by("seq").values_list("kind", "data"))
    halted = [data["detail"] for kind, data in events if kind == "run_halted"]
    return (
        [kind for kind, _ in events],
        halted,
        (run.status, run.halt_reason),
        list(run.approvals.order_by("seq").values_list("decision", "decided_by", "decided_via")),
        list(run.tool_executions.order_by("pk").values_list("status", "error")),
    )


def test_a_decision_just_before_the_deadline_applies_and_the_call_runs_once(alice):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS - 30)  # 30 s left: a decision takes milliseconds
    decide(alice, run.pk, [approval(request)])
    assert worked(run) == RunStatus.SUCCEEDED
    assert (workspace_path(alice.pk) / "greeting.txt").read_text() == "hello"
    assert run.events.filter(kind="tool_call_started").count() == 1


def test_a_decision_that_waits_for_the_runs_lock_while_the_deadline_passes_is_refused(alice):
    """The deadline is read where the decision is taken, under the run's lock (the one the
    expiry takes): a decision that reached the run in time but got its lock late is late."""
    run, request = waiting_run(alice)
    outcome: list[BaseException | object] = []

    def decide_meanwhile() -> None:
        try:
            outcome.append(decide(alice, run.pk, [approval(request)]))
        except BaseException as error:
            outcome.append(error)
        finally:
            connection.close()  # this thread's own

    with transaction.atomic():
        AgentRun.objects.select_for_update().get(pk=run.pk)  # as an expiry under way holds it
        deciding = threading.Thread(target=decide_meanwhile)
        deciding.start()
        wait_for(waits_for_a_lock, "the decision to wait for the run's lock")
        asked_ago(request, SECONDS + 1)
    deciding.join(timeout=120)
    [refused] = outcome
    assert isinstance(refused, DecisionRefused), refused
    assert EXPIRED in str(refused)
    ended_expired(run, request)
    assert not written(alice)


def waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_after_the_periodic_expiry_a_decision_is_told_when_the_request_expired(alice):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS + 1)
    assert expire_waiting() == 1
    with pytest.raises(
        DecisionRefused,
        match=f"{EXPIRED} .*: nobody decided within 45 seconds, so the write_file call did not run",
    ):
        decide(alice, run.pk, [approval(request)])
    ended_expired(run, request)


def terminal_run(user) -> tuple[AgentRun, ApprovalRequest]:
    """A run started as `runagent` starts one, in no conversation, waiting on its call."""
    with transaction.atomic():
        run = start_run(user, TASK, model="mock")
        queue(run)
    assert worked(run) == JobOutcome.AWAITING_APPROVAL
    run.refresh_from_db()
    return run, run.approvals.get(decision="")


def halt_detail(run: AgentRun) -> str:
    return run.events.get(kind="run_halted").data["detail"]


def test_an_expired_call_says_how_each_run_is_asked_again(alice):
    """A conversation's run is continued from its page; a run started at a terminal has no page,
    so its words send no one to a Continue they cannot find."""
    terminal, terminal_request = terminal_run(alice)
    chat, chat_request = waiting_run(alice)
    for request in (terminal_request, chat_request):
        asked_ago(request, SECONDS + 1)
    with pytest.raises(DecisionRefused) as refused:
        decide(alice, terminal.pk, [approval(terminal_request)])
    assert "Continue the run" not in str(refused.value)
    assert str(refused.value).endswith(TERMINAL_AGAIN)
    assert halt_detail(terminal).endswith(TERMINAL_AGAIN)
    with pytest.raises(DecisionRefused, match=r"Continue the run to be asked again\.$"):
        decide(alice, chat.pk, [approval(chat_request)])
    assert halt_detail(chat).endswith("Continue the run to be asked again.")


def test_the_chats_approve_after_the_deadline_is_refused_and_says_so(alice, as_alice):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS + 1)
    form = {"call": request.call_id, "digest": request.digest, "decision": "approve"}
    refused = as_alice.post(f"/runs/{run.pk}/decide/", form, **HTMX)
    assert refused.status_code == 400
    assert EXPIRED in refused.text
    assert "the write_file call did not run" in refused.text
    ended_expired(run, request)
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert "Expired: nobody decided in time, so it did not run" in page
    assert not written(alice)


def test_with_a_worker_running_a_late_decision_never_runs_the_call(alice, start_worker):
    start_worker(LOOP_APPROVAL="write_file=ask", LOOP_APPROVAL_SECONDS="86400")  # its sweep: idle
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    wait_for(
        lambda: AgentRun.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL, "a wait"
    )
    request = run.approvals.get()
    asked_ago(request, SECONDS + 1)
    with pytest.raises(DecisionRefused, match=EXPIRED):
        decide(alice, run.pk, [approval(request)])
    ended_expired(run, request)
    # The worker works the run once more, asked to go on: it asks again, and the call it was
    # refused never ran meanwhile.
    continue_run(alice, run.pk)
    wait_for(
        lambda: (
            run.approvals.filter(decision="").exists()
            and AgentRun.objects.get(pk=run.pk).status == RunStatus.AWAITING_APPROVAL
        ),
        "the continued run to ask again",
    )
    assert not run.events.filter(kind="tool_call_started").exists()
    assert not written(alice)


def test_runagent_resume_yes_after_the_deadline_is_refused(alice, worker_env):
    run, request = waiting_run(alice)
    asked_ago(request, SECONDS + 1)
    env = child_environment(
        **worker_env, LOOP_APPROVAL="write_file=ask", LOOP_APPROVAL_SECONDS=str(SECONDS)
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "runagent", "--resume", str(run.pk), "--yes"],
        cwd=PROJECT_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert EXPIRED in done.stderr
    ended_expired(run, request)
    assert not written(alice)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(SECONDS, "45 seconds"), (600, "10 minutes"), (3600, "1 hour"), (86400, "24 hours")],
)
def test_an_expired_run_says_how_long_it_waited_in_plain_words(alice, settings, seconds, said):
    settings.LOOP_APPROVAL_SECONDS = seconds
    run, request = waiting_run(alice)
    asked_ago(request, seconds + 1)
    assert expire_waiting() == 1
    (halted,) = ended_the_same(run)[1]
    assert f"nobody decided within {said} whether" in halted
    assert "LOOP_" not in halted


def test_a_call_past_its_deadline_is_neither_listed_nor_counted_as_waiting(alice, as_alice):
    late, late_request = waiting_run(alice)
    in_time, in_time_request = waiting_run(alice)
    asked_ago(late_request, SECONDS + 1)
    asked_ago(in_time_request, SECONDS - 30)
    assert [request.pk for request in waiting_for(alice)] == [in_time_request.pk]
    page = as_alice.get("/waiting/").content.decode()
    assert f"/c/{in_time.conversation_id}/" in page
    assert f"/c/{late.conversation_id}/" not in page
