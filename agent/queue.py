"""The run engine's queue as the run operations see it: a run's job deferred beside it, and a
job asked to stop. engine/tasks.py binds the job itself to the engine."""

from procrastinate.contrib.django import app

RUNS_QUEUE = "runs"
# The recovery has a queue (and a one-slot worker in each `manage.py worker`) of its own, so it
# runs even while every run slot is taken.
RECOVERY_QUEUE = "recovery"
# Mail and webhook deliveries (notifications/) wait on other servers: a few slots of their own,
# so a slow endpoint holds neither a run nor the recovery.
NOTIFY_QUEUE = "notify"
NOTIFY_CONCURRENCY = 4
WORK_RUN = "agent.work_run"


# A run its person just decided on goes before new runs: they are waiting on it (issue 29's
# measure: at the default priority, under load, a decision waited seconds behind new runs).
DECIDED_PRIORITY = 10


def defer_run(run_id: int, priority: int = 0) -> int:
    """Queue a job working `run_id`; inside the caller's transaction, so a worker sees the run and
    its job together or neither. Returns the job's id. Higher `priority` jobs are taken first."""
    task = app.configure_task(WORK_RUN, queue=RUNS_QUEUE, priority=priority)
    return task.defer(run_id=run_id)


def abort_job(job_id: int | None) -> None:
    """Ask the worker running this job to stop it (delivered by NOTIFY, polled as a fallback); a
    job not yet started is cancelled and never runs."""
    if job_id is not None:
        app.job_manager.cancel_job_by_id(job_id, abort=True)
