"""Runs still `running` whose process is gone: a worker whose heartbeat is stale (or whose row
is gone), a job that ended before its run, a `runagent` process whose run's heartbeat is stale.
Found here, and ended on the lost process's behalf from the run's log: fenced first (the attempt
moves on, so the process, if it was only cut off, can write nothing more), then recorded as any
end is, with what the run had done so far.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Now
from procrastinate.contrib.django.models import ProcrastinateJob, ProcrastinateWorker

from agent.core.events import AnswerSource, EndCause, RunFinished, RunStatus, event_from_dict
from agent.core.history import RunState, replay
from agent.core.loop import progress_report
from agent.core.results import ToolStatus
from agent.models import AgentRun
from agent.recorder import RunRecorder
from tools.fence import raise_fence
from workspace.directory import workspace_path


def stale_before() -> ExpressionWrapper:
    """The database's now less LOOP_STALE_SECONDS: a heartbeat older than that is a dead one.
    The database's clock, which Procrastinate's heartbeats use too, whatever the host's says."""
    stale = timedelta(seconds=settings.LOOP_STALE_SECONDS)
    return ExpressionWrapper(Now() - stale, output_field=DateTimeField())


def without_a_process(runs: QuerySet[AgentRun]) -> QuerySet[AgentRun]:
    """The runs nobody works any more although they are `running`:

    - worked in a process of their own (`runagent`, no job) whose heartbeat on the run is stale
      (or was never written: a run of a Loop from before the heartbeat);
    - worked by a job whose worker's heartbeat is stale, or whose worker row is gone;
    - whose job ended (failed) while they had not.
    """
    live_workers = ProcrastinateWorker.objects.filter(last_heartbeat__gte=stale_before())
    lost_jobs = ProcrastinateJob.objects.filter(status="doing").exclude(worker__in=live_workers)
    waiting_or_working = ProcrastinateJob.objects.filter(status__in=("todo", "doing"))
    jobless = Q(job_id__isnull=True) & (
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before())
    )
    job_lost = Q(job_id__in=lost_jobs.values("id"))
    job_ended = Q(job_id__isnull=False) & ~Q(job_id__in=waiting_or_working.values("id"))
    return runs.filter(status=RunStatus.RUNNING).filter(jobless | job_lost | job_ended)


def end_if_abandoned(run_id: int, status: RunStatus, error: str = "") -> bool:
    """End the run with `status` if nobody works it (`without_a_process`); False if somebody
    does, or it is not running. The lost process is fenced off first, in the same transaction
    that judged it lost, so a worker that takes the run meanwhile is never ended here."""
    with transaction.atomic():
        run = AgentRun.objects.select_for_update().filter(pk=run_id).first()
        # Judged once the row is held, in a statement of its own: a claim that got there first
        # is seen, with the job it brought.
        if run is None or not without_a_process(AgentRun.objects.filter(pk=run_id)).exists():
            return False
        run.attempt += 1
        run.worker = ""
        run.save(update_fields=["attempt", "worker"])
        raise_fence(workspace_path(run.user_id), run.pk, run.attempt)  # its snippets' files too
    rows = run.events.order_by("seq").values_list("kind", "data")
    state = replay(event_from_dict(kind, data) for kind, data in rows)
    RunRecorder(run)(ended_from_log(status, state, error))
    return True


def end_jobless_runs_without_a_process() -> int:
    """The recovery's part for runs worked by `runagent`: each one whose process is gone ends
    `interrupted`, which its owner may continue (or `runagent --resume` take up); it no longer
    holds one of its owner's active-run places. Says how many it ended."""
    jobless = without_a_process(AgentRun.objects.filter(job_id__isnull=True))
    ended = 0
    for run_id, worker in jobless.values_list("pk", "worker"):
        ended += end_if_abandoned(run_id, RunStatus.INTERRUPTED, process_gone(worker))
    return ended


def process_gone(worker: str) -> str:
    """A run's error when the process that worked it stopped with nobody to take it over."""
    who = f" ({worker})" if worker else ""
    return (
        f"The process working this run{who} stopped before it ended. Continue it to go on from "
        "where it stopped."
    )


def ended_from_log(
    status: RunStatus,
    state: RunState | None,
    error: str = "",
    cause: EndCause | None = None,
) -> RunFinished:
    """The end Loop records for a run it ends on its own behalf, with what the run's log says it
    had done so far."""
    state = state or RunState()
    return RunFinished(
        status=status,
        answer=progress_report(state.last_text, state.observations),
        answer_source=AnswerSource.PROGRESS,
        ok_tool_calls=sum(result.status is ToolStatus.OK for _, result in state.observations),
        error=error,
        cause=cause,
        iterations=state.step,
        tool_calls=state.tool_calls,
        prompt_tokens=state.usage.prompt_tokens,
        completion_tokens=state.usage.completion_tokens,
    )
