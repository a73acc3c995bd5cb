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
from procrastinate.contrib.django.django_connector import DjangoConnector
from procrastinate.contrib.django.models import ProcrastinateJob
from procrastinate.job_context import AbortReason
from procrastinate.jobs import JobDeferrer, Status
from procrastinate.manager import JobManager

from agent.abandoned import end_jobless_runs_without_a_process, runs_of_gone_processes_here
from agent.models import AgentRun
from agent.queue import RECOVERY_QUEUE, RUNS_QUEUE, WORK_RUN
from agent.queued import conversations_waiting
from agent.retention import prune
from agent.runs import start_waiting
from approvals.decisions import expire_waiting
from core.events import RunStatus
from core.interrupt import StopReason
from engine.execution import JobOutcome, work_job
from mcp_servers.discovery import discover_site_servers
from memory.forgetting import purge_forgotten_texts

logger = logging.getLogger(__name__)

RECOVERY_EVERY_SECONDS = 5
LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
# Where a run's job finds its worker's sandboxes (engine.worker hands them to Procrastinate).
SANDBOX = "sandbox"


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
            sandbox=context.additional_context.get(SANDBOX),
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
    - the runs of a dead worker of this host, found at once by its pid
      (`reclaim_runs_of_dead_workers_here`), whatever its heartbeat says;
    - runs whose job ended while they had not (the job failed on an error, say the database
      refusing a connection before the run was taken), which would otherwise wait for ever.

    And it ends `interrupted` each run of `runagent`'s (no job) whose process is gone: its owner
    may continue it, or take it up with `runagent --resume`.
    """
    recovered = await sync_to_async(reclaim_runs_of_dead_workers_here)()
    for job in await app.job_manager.get_stalled_jobs(
        task_name=WORK_RUN, seconds_since_heartbeat=settings.LOOP_STALE_SECONDS
    ):
        if job.id is not None:  # a job read from the queue always has one
            recovered += await sync_to_async(hand_over)(job.id, "its worker stopped")
    for run_id, job_id in await _runs_whose_job_ended():
        recovered += await sync_to_async(give_a_new_job)(
            run_id, job_id, f"its job {job_id} ended before it"
        )
    recovered += await sync_to_async(end_jobless_runs_without_a_process)()
    await sync_to_async(start_stalled_queues)()
    return recovered


def start_stalled_queues() -> int:
    """Start the next task of each conversation where tasks wait and no run goes: its last run's
    end is where that happens (agent.runs.start_next_queued), but a worker that died as it
    recorded it, or a task refused then (too many runs going), leaves the queue standing."""
    started = 0
    for conversation_id in conversations_waiting():
        with transaction.atomic():
            started += start_waiting(conversation_id) is not None
    return started


@app.periodic(cron="17 * * * *", periodic_id="purge_forgotten_texts")
@app.task(
    name="memory.purge_forgotten_texts", queue=RECOVERY_QUEUE, queueing_lock="purge_forgotten"
)
async def purge_forgotten_texts_job(timestamp: int) -> int:
    """Hourly: a forgetting record keeps the forgotten text no longer than
    LOOP_FORGOTTEN_TEXT_DAYS (memory/forgetting.py)."""
    return await sync_to_async(purge_forgotten_texts)()


@app.periodic(cron="37 * * * *", periodic_id="prune_old_records")
@app.task(name="agent.prune_old_records", queue=RECOVERY_QUEUE, queueing_lock="prune_old_records")
async def prune_old_records_job(timestamp: int) -> int:
    """Hourly: the event logs and tool outputs of runs that ended before LOOP_KEEP_EVENTS_DAYS,
    and the jobs that finished before LOOP_KEEP_JOBS_DAYS, go; the accounting stays
    (agent/retention.py). Returns how many runs were pruned."""
    pruned = await sync_to_async(prune)()
    if pruned:
        logger.info("Retention: %s", pruned)
    return pruned.runs


@app.periodic(cron="* * * * *", periodic_id="expire_waiting_calls")
@app.task(name="agent.expire_waiting_calls", queue=RECOVERY_QUEUE, queueing_lock="expire_waiting")
async def expire_waiting_calls(timestamp: int) -> int:
    """Every minute: a run whose call waited for its person's decision longer than
    LOOP_APPROVAL_SECONDS ends halted, the call never run (approvals/decisions.py). Returns how many
    runs ended."""
    return await sync_to_async(expire_waiting)()


@app.periodic(cron="* * * * *", periodic_id="discover_mcp_servers")
@app.task(name="mcp.discover_servers", queue=RECOVERY_QUEUE, queueing_lock="discover_mcp")
async def discover_mcp_servers(timestamp: int) -> int:
    """Every minute, the MCP servers due: the site's every LOOP_MCP_LIST_EVERY_SECONDS, and any
    that said its tools changed during a call, are listed again, so a changed tool is held for
    review and a server's health is current (mcp_servers/discovery.py). Returns how many
    answered. In a thread of its own: a slow server holds no other task's thread."""
    return await sync_to_async(discover_in_a_thread, thread_sensitive=False)()


def discover_in_a_thread() -> int:
    try:
        return discover_site_servers()
    finally:
        connection.close()


def reclaim_runs_of_dead_workers_here() -> int:
    """Give a new job, at once, to each run a worker of this host was working when its process
    ended (killed, crashed: its pid is gone, see agent/abandoned.py); a live worker claims it and
    resumes it, as the recovery does for a worker whose heartbeat went stale, only without
    waiting LOOP_STALE_SECONDS for that. Called by every worker as it starts (so one that its
    supervisor, systemd or a container's restart policy starts again takes its predecessor's runs
    back in seconds) and by the recovery every RECOVERY_EVERY_SECONDS (so a worker beside the
    dead one on the same host does too). Says how many."""
    reclaimed = 0
    for _, job_id, worker in runs_of_gone_processes_here():
        why = f"its worker {worker} is gone (no such process on this host)"
        reclaimed += hand_over(job_id, why, worker=worker)
    return reclaimed


def reclaim_as_a_worker_starts() -> int:
    """`reclaim_runs_of_dead_workers_here` from a worker's start, in a thread of its pool, whose
    connection is closed after (the thread goes on to work runs)."""
    try:
        return reclaim_runs_of_dead_workers_here()
    finally:
        connection.close()


def hand_over(job_id: int, why: str, *, worker: str = "") -> int:
    """Take a lost job off its dead worker: in one transaction, end it as failed, and give the
    live run still naming it a new job (so no worker can fetch the new job before the run names
    it). Nothing if the job is no longer `doing` (another recovery got there first), or, given
    `worker`, if its run is no longer that worker's (it was judged dead by its pid, and a claim
    came since). Says whether a run got a new job."""
    with transaction.atomic():
        job = ProcrastinateJob.objects.select_for_update().filter(pk=job_id, status="doing")
        if job.values_list("pk").first() is None:
            return 0
        runs = AgentRun.objects.select_for_update().filter(job_id=job_id, status__in=LIVE)
        if worker:
            runs = runs.filter(worker=worker)
        run_id = runs.values_list("pk", flat=True).first()
        if worker and run_id is None:
            return 0
        with connection.cursor() as cursor:  # Procrastinate's own query, in this transaction
            cursor.execute(
                sql.queries["finish_job"],
                {"job_id": job_id, "status": Status.FAILED.value, "delete_job": False},
            )
        if run_id is None:  # its run ended or moved on meanwhile
            return 0
        return give_a_new_job(run_id, job_id, why)


def give_a_new_job(run_id: int, old_job: int, why: str) -> int:
    """Queue a new job for the run, if it is still live under `old_job`, and name it on the run,
    in one transaction: a worker sees both or neither. Says whether it did."""
    with transaction.atomic():
        live = AgentRun.objects.select_for_update().filter(pk=run_id, job_id=old_job)
        if live.filter(status__in=LIVE).values_list("pk").first() is None:
            return 0
        new_job = defer_on_django(run_id)
        # Claimed by nobody until a worker takes it up: a live worker may fetch the new job
        # before it claims the run, and the run, still naming its dead worker, must not look
        # like that worker's own again (agent/abandoned.runs_of_gone_processes_here).
        AgentRun.objects.filter(pk=run_id).update(job_id=new_job, heartbeat_at=None)
    logger.warning("Run %s: %s; job %s takes it up", run_id, why, new_job)
    return 1


def defer_on_django(run_id: int) -> int:
    """The run's job, deferred on Django's connection, in its transaction, whichever connector
    the app has now (a worker's is a pool of its own)."""
    template = work_run.configure(queue=RUNS_QUEUE).job
    return JobDeferrer(job_manager=JobManager(DjangoConnector()), job=template).defer(run_id=run_id)


async def _runs_whose_job_ended() -> list[tuple[int, int]]:
    """Live runs whose job is no longer to do or doing. A run worked in a process of its own
    (`runagent`, no job) is not one of them."""
    live_jobs = ProcrastinateJob.objects.filter(status__in=("todo", "doing")).values("id")
    orphans = (
        AgentRun.objects.filter(status__in=LIVE, job_id__isnull=False)
        .exclude(job_id__in=live_jobs)
        .values_list("pk", "job_id")
    )
    return await sync_to_async(lambda: [(run, job) for run, job in orphans if job is not None])()
