"""The run engine's own rules, in this process: a run and its Procrastinate job are stored
together, a worker takes a run with a fencing attempt, a run goes on from its log (handed back,
lost, continued) without running a tool call twice, and a run that keeps losing its worker ends.

Real worker processes (SIGKILL, SIGTERM, many runs at once) are tests/test_worker.py's.
"""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import PermissionDenied
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.llm.scripted import ScriptedLLM, answer
from agent.models import AgentRun, RunResume
from agent.queue import WORK_RUN
from agent.recorder import RunLost, RunRecorder
from agent.runs import (
    InvalidTask,
    TooManyActiveRuns,
    cancel_run,
    continue_run,
    continue_run_as_operator,
    default_limits,
    new_conversation,
    start_run,
    submit_run,
)
from agent.selectors import history_of
from core.events import ContinuedBy, ModelReplied, ResumeReason, RunStatus
from core.interrupt import StopReason
from engine.execution import (
    CONTINUE_NOTE,
    JobOutcome,
    claim,
    execute_run,
    take_and_work,
    work_job,
    worked_seconds,
)
from tests.conftest import wait_for

RELEASED = JobOutcome.RELEASED

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = "Count slowly to 3"  # the mock: three run_code calls of about a second each


def job_of(run: AgentRun) -> ProcrastinateJob:
    run.refresh_from_db()
    return ProcrastinateJob.objects.get(pk=run.job_id)


def test_a_submitted_run_is_stored_with_its_job(alice):
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    job = job_of(run)
    assert (job.task_name, job.args, job.status) == (WORK_RUN, {"run_id": run.pk}, "todo")
    assert job.queue_name == "runs"


def test_a_run_refused_at_submit_leaves_no_job(alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 1
    first = submit_run(alice, "one", new_conversation(alice), model="mock")
    with pytest.raises(TooManyActiveRuns):
        submit_run(alice, "two", new_conversation(alice), model="mock")
    # (Procrastinate's tables are not emptied between tests: only jobs from here on count.)
    assert not ProcrastinateJob.objects.filter(pk__gt=first.job_id).exists()


def test_a_job_works_its_run_and_a_stale_job_does_nothing(alice, workspaces):
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    stale = run.job_id - 1 if run.job_id > 1 else run.job_id + 1
    assert work_job(run.pk, job_id=stale, worker="w", stop_requested=lambda: None) == (
        "nothing to do"
    )
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        RunStatus.SUCCEEDED
    )
    run.refresh_from_db()
    assert (run.answer, run.attempt) == ("17 * 23 = 391", 1)
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        "nothing to do"
    )


def test_a_worker_that_lost_its_run_cannot_write_to_it(alice):
    run = start_run(alice, "a task", model="mock")
    mine = claim(run.pk, job_id=None, worker="old")
    recorder = RunRecorder(mine.run)
    recorder(
        ModelReplied(step=1, text="first", tool_calls=[], prompt_tokens=1, completion_tokens=1)
    )
    # Another worker takes the run over (say the first was cut off and thought dead).
    AgentRun.objects.filter(pk=run.pk).update(attempt=mine.run.attempt + 1)
    with pytest.raises(RunLost):
        recorder(
            ModelReplied(step=2, text="late", tool_calls=[], prompt_tokens=1, completion_tokens=1)
        )
    assert list(run.events.values_list("seq", "data__text")) == [(1, "first")]
    recorder.update(answer="from the old worker")
    run.refresh_from_db()
    assert run.answer == ""


def test_handed_back_mid_tool_call_resumes_without_running_a_call_twice(alice, workspaces):
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    job = run.job_id
    stop = threading.Event()

    def hand_back_once_a_call_runs() -> StopReason | None:
        if run.events.filter(kind="tool_call_started").exists():
            stop.set()
        return StopReason.HAND_BACK if stop.is_set() else None

    handed_back = work_job(
        run.pk, job_id=job, worker="first", stop_requested=hand_back_once_a_call_runs
    )
    assert handed_back == RELEASED
    run.refresh_from_db()
    assert (run.status, run.worker) == (RunStatus.QUEUED, "")  # handed back: waiting again
    started = set(run.events.filter(kind="tool_call_started").values_list("data__call_id"))
    finished = set(run.events.filter(kind="tool_call_finished").values_list("data__call_id"))
    assert started - finished  # the call it was in has no finish event

    assert work_job(run.pk, job_id=job, worker="second", stop_requested=lambda: None) == (
        RunStatus.SUCCEEDED
    )
    run.refresh_from_db()
    resumed = run.events.get(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.HANDED_BACK
    interrupted = run.events.filter(kind="tool_call_finished", data__status="interrupted")
    assert interrupted.count() == 1
    call_ids = list(run.tool_executions.values_list("call_id", flat=True))
    assert len(call_ids) == len(set(call_ids))  # no call recorded twice
    seqs = list(run.events.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert list(RunResume.objects.filter(run=run).values_list("attempt", "reason")) == [
        (2, ResumeReason.HANDED_BACK)
    ]
    assert run.resumes == 0  # a hand back is not a lost worker


def test_a_lost_workers_run_is_resumed_and_counted(alice, workspaces):
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, worker="gone:1", attempt=1)
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        RunStatus.SUCCEEDED
    )
    run.refresh_from_db()
    assert (run.resumes, run.attempt) == (1, 2)
    resume = RunResume.objects.get(run=run)
    assert (resume.reason, resume.lost_worker) == (ResumeReason.WORKER_LOST, "gone:1")
    # It had no event yet, so it started afresh after saying it resumed.
    assert list(run.events.values_list("kind", flat=True))[:2] == ["run_resumed", "run_started"]


def test_a_run_that_keeps_losing_its_worker_ends_failed(alice, settings, workspaces):
    settings.LOOP_MAX_RESUMES = 2
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    AgentRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, worker="gone:3", attempt=3, resumes=2
    )
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        RunStatus.FAILED
    )
    run.refresh_from_db()
    assert run.resumes == 3
    assert "stopped 3 times" in run.error
    assert "LOOP_MAX_RESUMES" in run.error
    assert run.events.last().kind == "run_finished"


def test_a_run_given_up_keeps_what_it_had_done(alice, settings, workspaces):
    settings.LOOP_MAX_RESUMES = 0
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    handed_back = work_job(  # its worker stops after the first call
        run.pk,
        job_id=run.job_id,
        worker="first",
        stop_requested=lambda: (
            StopReason.HAND_BACK if run.events.filter(kind="tool_call_finished").exists() else None
        ),
    )
    assert handed_back == RELEASED
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, worker="gone:1")
    work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.answer.startswith("Stopped before a final answer.")
    assert "What worked: run_code." in run.answer
    assert run.iterations >= 1


def test_a_halted_run_continues_with_renewed_limits_and_no_call_again(alice, workspaces):
    limits = default_limits(max_iterations=2)
    run = execute_run(start_run(alice, SLOW, model="mock", limits=limits))
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    before = run.tool_executions.count()

    run = continue_run(alice, run.pk)
    assert (run.status, run.answer, run.error) == (RunStatus.QUEUED, "", "")
    assert job_of(run).status == "todo"
    work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.limits["max_iterations"] > 2
    call_ids = list(run.tool_executions.values_list("call_id", flat=True))
    assert len(call_ids) == len(set(call_ids)) > before
    resumed = run.events.get(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.CONTINUED
    assert {"role": "user", "content": CONTINUE_NOTE} in history_of(run)


def test_only_the_owner_or_an_operator_may_continue(alice, bob, operator, workspaces):
    run = execute_run(start_run(alice, SLOW, model="mock", limits=default_limits(max_iterations=1)))
    with pytest.raises(AgentRun.DoesNotExist):
        continue_run(bob, run.pk)
    with pytest.raises(PermissionDenied):
        continue_run_as_operator(bob, run.pk)
    assert continue_run_as_operator(operator, run.pk).status == RunStatus.QUEUED


def test_a_run_that_succeeded_cannot_be_continued(alice, workspaces):
    run = execute_run(start_run(alice, "What is 17 * 23?", model="mock"))
    with pytest.raises(InvalidTask, match="only a run that was halted"):
        continue_run(alice, run.pk)


def test_continue_counts_against_the_active_runs_limit(alice, settings, workspaces):
    halted = execute_run(
        start_run(alice, SLOW, model="mock", limits=default_limits(max_iterations=1))
    )
    settings.LOOP_USER_ACTIVE_RUNS = 1
    submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    with pytest.raises(TooManyActiveRuns):
        continue_run(alice, halted.pk)
    halted.refresh_from_db()
    assert halted.status == RunStatus.HALTED


def test_stop_asks_procrastinate_to_abort_the_runs_job(alice):
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    ProcrastinateJob.objects.filter(pk=run.job_id).update(status="doing")
    cancel_run(alice, run.pk)
    assert job_of(run).abort_requested


def test_a_queued_run_stopped_never_starts(alice):
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    cancel_run(alice, run.pk)
    assert job_of(run).status == "cancelled"
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        "nothing to do"
    )


def test_a_run_claimed_after_its_stop_ends_cancelled_without_asking_the_model(alice, workspaces):
    """Its worker died mid-run, and the Stop came before another took the run: its claim reads
    the Stop, so the run ends cancelled with what it had done, the model never asked again."""
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")

    def lost_once_a_call_worked() -> StopReason | None:
        worked = run.tool_executions.filter(status="ok").exists()
        return StopReason.HAND_BACK if worked else None

    assert work_job(
        run.pk, job_id=run.job_id, worker="first", stop_requested=lost_once_a_call_worked
    ) == (RELEASED)
    # ... as if its worker had died instead: still running, its worker gone.
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, worker="gone:1")
    cancel_run(alice, run.pk)
    run.refresh_from_db()
    assert (run.status, run.cancel_requested_at is not None) == (RunStatus.RUNNING, True)
    calls_before = run.events.filter(kind="tool_call_started").count()
    worked_before = run.tool_executions.filter(status="ok").count()

    model = ScriptedLLM([answer("never asked")])
    take_and_work(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None, llm=model)

    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert model.turns == []
    assert run.events.filter(kind="tool_call_started").count() == calls_before
    assert run.tool_executions.filter(status="ok").count() == worked_before  # kept, none more
    assert run.events.last().data["ok_tool_calls"] == worked_before
    assert run.events.filter(kind="run_resumed").count() == 1
    assert run.events.last().kind == "run_finished"


def test_worked_time_leaves_out_the_time_a_run_lay_dead():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    rows = [
        ("run_started", at(0)),
        ("model_replied", at(4)),
        ("tool_call_started", at(5)),  # the worker died here; found 30 s later
        ("run_resumed", at(35)),
        ("tool_call_finished", at(36)),
        ("model_replied", at(38)),
    ]
    assert worked_seconds(rows) == 8.0


def test_stop_reaches_a_run_in_the_middle_of_a_tool_call(alice, workspaces):
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    asked = threading.Event()

    def stop_once_a_call_runs() -> StopReason | None:
        if run.events.filter(kind="tool_call_started").exists():
            asked.set()
        return StopReason.CANCEL if asked.is_set() else None

    work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=stop_once_a_call_runs)
    wait_for(asked.is_set, "the stop")
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.tool_executions.count() == 1  # the call it was in ended; no other started
    assert run.events.last().kind == "run_finished"


def test_the_recovery_gives_a_dead_workers_run_a_new_job(alice, settings):
    from asgiref.sync import async_to_sync
    from django.db import connection
    from procrastinate.contrib.django import app

    from engine.tasks import recover_runs

    settings.LOOP_STALE_SECONDS = 30
    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    old_job = run.job_id
    dead = async_to_sync(app.job_manager.register_worker)()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s",
            [dead, old_job],
        )
        cursor.execute(
            "UPDATE procrastinate_workers SET last_heartbeat = NOW() - INTERVAL '31 seconds' "
            "WHERE id = %s",
            [dead],
        )
    assert async_to_sync(recover_runs.func)(timestamp=0) == 1
    run.refresh_from_db()
    assert run.job_id != old_job
    assert ProcrastinateJob.objects.get(pk=old_job).status == "failed"
    new = ProcrastinateJob.objects.get(pk=run.job_id)
    assert (new.status, new.args) == ("todo", {"run_id": run.pk})
    # A live worker's run is left alone.
    assert async_to_sync(recover_runs.func)(timestamp=0) == 0


def test_a_continue_records_who_asked_for_it(alice, operator, workspaces):
    from core.wording import OWNERS_WHO, resumed_text

    limits = default_limits(max_iterations=1)
    mine = execute_run(start_run(alice, SLOW, model="mock", limits=limits))
    theirs = execute_run(start_run(alice, SLOW, model="mock", limits=limits))
    continue_run(alice, mine.pk)
    continue_run_as_operator(operator, theirs.pk)
    for run in (mine, theirs):
        run.refresh_from_db()
        work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)
    said = {
        run.pk: run.events.get(kind="run_resumed").data["by"]
        for run in AgentRun.objects.filter(pk__in=(mine.pk, theirs.pk))
    }
    assert said == {mine.pk: "owner", theirs.pk: "operator"}
    assert RunResume.objects.get(run=theirs).requested_by == operator
    assert RunResume.objects.get(run=mine).by is ContinuedBy.OWNER
    assert RunResume.objects.get(run=theirs).by is ContinuedBy.OPERATOR
    assert resumed_text("continued", "operator", who=OWNERS_WHO) == (
        "Continued: an operator asked it to go on"
    )
    assert resumed_text("continued", "owner") == "Continued: the owner asked it to go on"


def test_a_worker_whose_run_was_taken_over_stops_working_it(alice, workspaces):
    """Worker A is thought dead (a partition) while it works; B takes the run over. A's next
    write is refused and A stops; B finishes the run, and nothing A did after that is kept."""
    from django.db import connection

    from engine.execution import work

    run = submit_run(alice, SLOW, new_conversation(alice), model="mock")
    outcome: list[BaseException | str] = []

    def worker_a() -> None:
        try:
            outcome.append(
                work_job(run.pk, job_id=run.job_id, worker="A", stop_requested=lambda: None)
            )
        except BaseException as error:
            outcome.append(error)
        finally:
            connection.close()  # this thread's own

    a = threading.Thread(target=worker_a)
    a.start()
    wait_for(lambda: run.events.filter(kind="tool_call_started").exists(), "A's first call")
    taken = claim(run.pk, job_id=run.job_id, worker="B")
    taken_at = run.events.count()
    a.join(timeout=60)
    [a_ended] = outcome
    assert a_ended == RELEASED, a_ended
    assert run.events.count() == taken_at  # A wrote nothing after B took the run

    finished = work(taken)
    assert finished.status == RunStatus.SUCCEEDED
    assert (finished.attempt, taken.reason) == (2, ResumeReason.WORKER_LOST)
    seqs = list(run.events.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_the_recovery_gives_a_run_whose_job_failed_a_new_one(alice, workspaces):
    from asgiref.sync import async_to_sync
    from django.db import connection

    from engine.tasks import recover_runs

    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    in_process = start_run(
        alice, "a run of runagent's, with no job, its process alive", model="mock"
    )
    AgentRun.objects.filter(pk=in_process.pk).update(
        status=RunStatus.RUNNING, heartbeat_at=datetime.now(UTC)
    )
    failed = run.job_id
    with connection.cursor() as cursor:  # say the claim met a database refusing connections
        cursor.execute("UPDATE procrastinate_jobs SET status = 'failed' WHERE id = %s", [failed])
    assert async_to_sync(recover_runs.func)(timestamp=0) == 1
    run.refresh_from_db()
    assert run.job_id != failed
    assert ProcrastinateJob.objects.get(pk=run.job_id).status == "todo"
    assert work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None) == (
        RunStatus.SUCCEEDED
    )
    assert async_to_sync(recover_runs.func)(timestamp=0) == 0


def test_a_run_at_its_cap_finishes_after_a_hand_back_mid_call(alice, workspaces):
    """Three calls and the answer fill a cap of four turns; a hand back in the middle of the
    first call makes the model ask for it again, a turn the run did not choose and is not
    charged for (issue 25, 14)."""
    from agent.runs import queue

    run = start_run(alice, SLOW, model="mock", limits=default_limits(max_iterations=4))
    queue(run)

    def hand_back_in_the_first_call() -> StopReason | None:
        started = run.events.filter(kind="tool_call_started").exists()
        return StopReason.HAND_BACK if started else None

    assert (
        work_job(
            run.pk, job_id=run.job_id, worker="first", stop_requested=hand_back_in_the_first_call
        )
        == RELEASED
    )
    assert work_job(run.pk, job_id=run.job_id, worker="second", stop_requested=lambda: None) == (
        RunStatus.SUCCEEDED
    )
    run.refresh_from_db()
    assert run.iterations == 5  # the record keeps every turn
    assert run.events.filter(kind="tool_call_finished", data__status="interrupted").count() == 1
    assert not run.events.filter(kind="run_halted").exists()


def test_a_run_the_database_restarted_under_is_resumed_uncounted(alice, workspaces):
    """Its worker could not hand it back (the database was away): the run was working when the
    server (re)started, which is no fault of the run's (issue 25, 14). A run whose worker died
    with the database up is counted, as before."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        server_started = cursor.fetchone()[0]
    under_the_restart = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    after_it = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    for run, began in (
        (under_the_restart, server_started - timedelta(seconds=5)),
        (after_it, server_started + timedelta(seconds=5)),
    ):
        AgentRun.objects.filter(pk=run.pk).update(
            status=RunStatus.RUNNING, worker="gone:1", attempt=1, started_at=began
        )
        work_job(run.pk, job_id=run.job_id, worker="w", stop_requested=lambda: None)
        run.refresh_from_db()
    assert (under_the_restart.status, under_the_restart.resumes) == (RunStatus.SUCCEEDED, 0)
    assert RunResume.objects.get(run=under_the_restart).reason == ResumeReason.DATABASE_RESTARTED
    assert (after_it.status, after_it.resumes) == (RunStatus.SUCCEEDED, 1)
    assert RunResume.objects.get(run=after_it).reason == ResumeReason.WORKER_LOST
