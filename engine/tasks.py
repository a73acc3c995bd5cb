"""The run engine's tasks on Procrastinate: one job works one run; a periodic job recovers runs
whose worker died.

Procrastinate (PostgreSQL-native, so the embedded default needs nothing new) hands a deferred job
to a worker at once by LISTEN/NOTIFY, runs many sync jobs at once in threads, keeps a heartbeat per
worker and delivers abort requests. `manage.py worker` runs it. What a job does with its run is
engine/execution.py's `work_job`; this module only binds it to the engine.
"""

import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from procrastinate import JobContext, RetryStrategy, sql
from procrastinate.contrib.django import app
from procrastinate.contrib.django.models import ProcrastinateJob
from procrastinate.job_context import AbortReason
from procrastinate.jobs import Status

from agent.abandoned import end_jobless_runs_without_a_process, runs_of_gone_processes_here
from agent.core.events import RunStatus
from agent.core.interrupt import StopReason
from agent.models import AgentRun
from agent.queue import RECOVERY_QUEUE, RUNS_QUEUE, WORK_RUN, defer_run
from engine.execution import JobOutcome, work_job
from memory.forgetting import purge_forgotten_texts

logger = logging.getLogger(__name__)

RECOVERY_EVERY_SECONDS = 5
LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)


class RunHandedBack(Exception):
    """The worker is stopping (or lost the database): the job goes back to the queue, at once,
    and whichever worker takes it next resumes the run from its log."""


@app.task(
    name=WORK_RUN,
    queue=RUNS_QUEUE,
    pass_context=True,
    # A hand back is not a failure: the job is queued again at once, as often as it happens. The
    # runs a crashing worker takes down are bounded by LOOP_MAX_RESUMES, not here.
    retry=RetryStrategy(max_attempts=1_000_000, retry_exceptions={RunHandedBack}),
)
def work_run(context: JobContext, run_id: int) -> str:
    """The run's job; a run its worker let go unfinished raises RunHandedBack, so procrastinate
    queues the job again."""
    close_old_connections()
    try:
        outcome = work_job(
            run_id,
            job_id=context.job.id,
            worker=context.worker_name or "worker",
            stop_requested=lambda: stop_reason(context),
        )
    except Exception as error:
        # Said here in one line, whatever it was (the worker keeps database errors out of its own
        # log): the recovery gives the run a new job.
        logger.warning(
            "Run %s: its job failed (%s: %s); it will be taken up again",
            run_id,
            type(error).__name__,
            error,
        )
        raise
    finally:
        # Closed, not kept for CONN_MAX_AGE: after a burst most run threads idle, and a kept
        # connection is only looked at when its thread next works a run.
        connection.close()
    if outcome is JobOutcome.RELEASED:
        raise RunHandedBack(f"Run {run_id} was handed back unfinished; its next job resumes it")
    return outcome


def stop_reason(context: JobContext) -> StopReason | None:
    """What procrastinate asks of this job now: abort on a person's request (Stop), or give it
    back because the worker is shutting down."""
    match context.abort_reason():
        case AbortReason.USER_REQUEST:
            return StopReason.CANCEL
        case AbortReason.SHUTDOWN:
            return StopReason.HAND_BACK
    return None


@app.periodic(cron=f"* * * * * */{RECOVERY_EVERY_SECONDS}", periodic_id="recover_runs")
@app.task(name="agent.recover_runs", queue=RECOVERY_QUEUE, queueing_lock="recover_runs")
async def recover_runs(timestamp: int) -> int:
    """Give a new job to each run that has lost its own, which a live worker then picks up and
    resumes from the run's log:

    - the runs of a dead worker (no heartbeat for LOOP_STALE_SECONDS). The dead worker's job is
      ended as failed first: if that worker was only cut off and comes back, finishing its old job
      cannot touch the new one, and its writes to the run are already fenced off by the attempt;
    - runs whose job ended while they had not (the job failed on an error, say the database
      refusing a connection before the run was taken), which would otherwise wait for ever.

    And it ends `interrupted` each run of `runagent`'s (no job) whose process is gone: its owner
    may continue it, or take it up with `runagent --resume`.
    """
    recovered = 0
    for job in await app.job_manager.get_stalled_jobs(
        task_name=WORK_RUN, seconds_since_heartbeat=settings.LOOP_STALE_SECONDS
    ):
        await app.job_manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=False)
        run_id = await _run_of(job.id)
        if run_id is not None:  # else its run ended or moved on meanwhile
            recovered += await _give_a_new_job(run_id, job.id, "its worker stopped")
    for run_id, job_id in await _runs_whose_job_ended():
        recovered += await _give_a_new_job(run_id, job_id, f"its job {job_id} ended before it")
    return recovered + await sync_to_async(end_jobless_runs_without_a_process)()


@app.periodic(cron="17 * * * *", periodic_id="purge_forgotten_texts")
@app.task(
    name="memory.purge_forgotten_texts", queue=RECOVERY_QUEUE, queueing_lock="purge_forgotten"
)
async def purge_forgotten_texts_job(timestamp: int) -> int:
    """Hourly: a forgetting record keeps the forgotten text no longer than
    LOOP_FORGOTTEN_TEXT_DAYS (memory/forgetting.py)."""
    return await sync_to_async(purge_forgotten_texts)()


def reclaim_runs_of_dead_workers_here() -> int:
    """What a worker does as it starts, before it takes any job: each run a worker of this host
    was working when its process ended (killed, crashed: its pid is gone, see
    agent/abandoned.py) gets a new job at once, which a live worker claims and resumes, as the
    recovery does for a worker whose heartbeat went stale, only without waiting
    LOOP_STALE_SECONDS for it. So a worker that its supervisor (`make run`, systemd, a
    container's restart policy) starts again takes its predecessor's runs back in seconds.

    Synchronous, on Django's connection, and called before the worker replaces the app's
    connector: each run is handed over in one transaction (old job failed, new job, the run's
    job_id), so no worker can fetch the new job before the run names it. Says how many."""
    reclaimed = 0
    try:
        for run_id, job_id, worker in runs_of_gone_processes_here():
            reclaimed += _hand_over(run_id, job_id, worker)
    finally:
        connection.close()  # this thread's own
    return reclaimed


def _hand_over(run_id: int, job_id: int, worker: str) -> int:
    """End the dead worker's job as failed and give the run a new one, if nothing moved since it
    was judged dead: the run still running under that job and worker, the job still `doing`
    (the stale-worker recovery may have got there first)."""
    with transaction.atomic():
        run = AgentRun.objects.select_for_update().filter(
            pk=run_id, status=RunStatus.RUNNING, job_id=job_id, worker=worker
        )
        job = ProcrastinateJob.objects.select_for_update().filter(pk=job_id, status="doing")
        if run.values_list("pk").first() is None or job.values_list("pk").first() is None:
            return 0
        with connection.cursor() as cursor:  # Procrastinate's own query, on this transaction
            cursor.execute(
                sql.queries["finish_job"],
                {"job_id": job_id, "status": Status.FAILED.value, "delete_job": False},
            )
        new_job = defer_run(run_id)
        AgentRun.objects.filter(pk=run_id).update(job_id=new_job)
    logger.warning(
        "Run %s: its worker %s is gone (no such process on this host); job %s takes it up",
        run_id,
        worker,
        new_job,
    )
    return 1


async def _give_a_new_job(run_id: int, old_job: int, why: str) -> int:
    new_job = await work_run.defer_async(run_id=run_id)
    await AgentRun.objects.filter(pk=run_id, job_id=old_job).aupdate(job_id=new_job)
    logger.warning("Run %s: %s; job %s takes it up", run_id, why, new_job)
    return 1


async def _runs_whose_job_ended() -> list[tuple[int, int]]:
    """Live runs whose job is no longer to do or doing. A run worked in a process of its own
    (`runagent`, no job) is not one of them."""
    live_jobs = ProcrastinateJob.objects.filter(status__in=("todo", "doing")).values("id")
    orphans = (
        AgentRun.objects.filter(status__in=LIVE, job_id__isnull=False)
        .exclude(job_id__in=live_jobs)
        .values_list("pk", "job_id")
    )
    return await sync_to_async(list)(orphans)


async def _run_of(job_id: int) -> int | None:
    """The live run this job was working, if it still is that run's job."""
    live = AgentRun.objects.filter(job_id=job_id, status__in=LIVE)
    return await live.values_list("pk", flat=True).afirst()
