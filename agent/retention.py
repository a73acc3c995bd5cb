"""Retention: what a long-lived Loop stops keeping, so its store does not grow for ever.

Two settings, both 0 (keep everything) by default:

- LOOP_KEEP_EVENTS_DAYS: a run that ended longer ago than this loses its event log (RunEvent
  rows) and the text of its tool executions (result and error). The accounting stays: the run's
  row (task, answer, status, cause, tokens, iterations, tool calls, timings), each tool
  execution's tool, arguments, status and duration, breaker trips and resumes. The run is marked
  `log_pruned_at`, which the chat, the console and exports show instead of an empty timeline; it
  can no longer be continued (a run goes on from its log).
- LOOP_KEEP_JOBS_DAYS: Procrastinate jobs that finished (succeeded, failed, cancelled, aborted)
  longer ago than this are deleted, with their events. Jobs to do or doing are never touched.

A live run is never pruned: a run is marked only while it is ended, under its row lock, so a
Continue racing the prune either reopens it first (then it is not marked) or finds it marked
(then it is refused). Everything is deleted or cleared at most BATCH rows a statement, and a
tenth as many runs a transaction, so nothing holds locks on many rows for long. The periodic task
(engine/tasks.py, `agent.prune_old_records`) calls `prune`.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from agent.models import FINISHED, AgentRun, RunEvent, ToolExecution

logger = logging.getLogger(__name__)

# Rows per statement: each batch is its own short transaction.
BATCH = 1000
# Procrastinate's job statuses of a job that will not run again.
FINISHED_JOB_STATUSES = ("succeeded", "failed", "cancelled", "aborted")


@dataclass
class Pruned:
    """What one pass pruned, for the task's log line and the tests."""

    runs: int = 0
    events: int = 0
    tool_executions: int = 0
    jobs: int = 0

    def __bool__(self) -> bool:
        return any((self.runs, self.events, self.tool_executions, self.jobs))


def keep_for(days: int) -> timedelta | None:
    """How long records are kept; None: for ever (0 or less, the default). A number of days
    beyond what a date can count keeps them for ever too, rather than failing every pass."""
    if days <= 0 or days >= timedelta.max.days:
        return None
    return timedelta(days=days)


def prune(now: datetime | None = None, batch: int = BATCH) -> Pruned:
    """One pass of the retention: old runs' logs, then old finished jobs."""
    now = now or timezone.now()
    pruned = Pruned()
    events_for = keep_for(settings.LOOP_KEEP_EVENTS_DAYS)
    if events_for is not None:
        prune_run_logs(now - events_for, pruned, batch)
    jobs_for = keep_for(settings.LOOP_KEEP_JOBS_DAYS)
    if jobs_for is not None:
        pruned.jobs = prune_finished_jobs(now - jobs_for, batch)
    return pruned


def prune_run_logs(cutoff: datetime, pruned: Pruned, batch: int = BATCH) -> None:
    """Prune the runs that ended before `cutoff`, a few at a time (`batch` // 10 runs, about
    `batch` events), each few in one short transaction: the mark and the deletes commit together,
    so a pass cut off half way leaves no run marked with its log still there."""
    runs_at_once = max(1, batch // 10)
    while ids := ended_before(cutoff, runs_at_once):
        with transaction.atomic():
            marked = mark_pruned(ids)
            if not marked:
                continue  # reopened meanwhile: live again, and not pruned
            pruned.runs += len(marked)
            pruned.events += delete_in_batches(RunEvent.objects.filter(run_id__in=marked), batch)
            pruned.tool_executions += clear_tool_outputs(marked, batch)


def ended_before(cutoff: datetime, limit: int) -> list[int]:
    """The ids of up to `limit` runs not yet pruned that ended before `cutoff`, oldest first."""
    unpruned = AgentRun.objects.filter(
        status__in=FINISHED, finished_at__lt=cutoff, log_pruned_at__isnull=True
    )
    return list(unpruned.order_by("finished_at").values_list("pk", flat=True)[:limit])


def mark_pruned(ids: list[int]) -> list[int]:
    """Mark these runs pruned, those still ended; the ids marked. The UPDATE checks the status
    again under each row's lock: a run a Continue has just reopened is not marked, and a Continue
    that comes after the mark finds it and is refused (agent.runs.reopen)."""
    marking = AgentRun.objects.filter(pk__in=ids, status__in=FINISHED, log_pruned_at__isnull=True)
    marked = list(marking.select_for_update().values_list("pk", flat=True))
    AgentRun.objects.filter(pk__in=marked).update(log_pruned_at=timezone.now())
    return marked


def clear_tool_outputs(run_ids: list[int], batch: int) -> int:
    """Clear the result and error of these runs' tool executions, `batch` rows a statement."""
    cleared = 0
    kept = ToolExecution.objects.filter(run_id__in=run_ids, pruned_at__isnull=True)
    while ids := list(kept.order_by().values_list("pk", flat=True)[:batch]):
        cleared += ToolExecution.objects.filter(pk__in=ids).update(
            result="", error="", pruned_at=timezone.now()
        )
    return cleared


def delete_in_batches(rows: QuerySet[Any], batch: int) -> int:
    """Delete `rows` `batch` at a time, one statement each (nothing refers to an event, so each
    is a single DELETE): no statement takes a lock on more than `batch` rows."""
    deleted = 0
    while ids := list(rows.order_by().values_list("pk", flat=True)[:batch]):
        deleted += rows.model.objects.filter(pk__in=ids).delete()[0]
    return deleted


def prune_finished_jobs(cutoff: datetime, batch: int = BATCH) -> int:
    """Delete the Procrastinate jobs that finished before `cutoff`, and their events, `batch`
    jobs a statement (each committed on its own). When a job finished is its last event's time
    (a job row has no end of its own); a job with no event is judged by when it was scheduled,
    and one with neither is left alone."""
    deleted = 0
    with connection.cursor() as cursor:
        while True:
            cursor.execute(FINISHED_JOBS_SQL, [list(FINISHED_JOB_STATUSES), cutoff, batch])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return deleted
            # Their events go with them (ON DELETE CASCADE), and Procrastinate's own trigger
            # unlinks a periodic task's record of the job. The status is checked again: a job
            # retried meanwhile is to do again, and stays.
            cursor.execute(
                "DELETE FROM procrastinate_jobs WHERE id = ANY(%s) "
                "AND status = ANY(%s::procrastinate_job_status[])",
                [ids, list(FINISHED_JOB_STATUSES)],
            )
            deleted += cursor.rowcount


FINISHED_JOBS_SQL = """
SELECT job.id FROM procrastinate_jobs AS job
WHERE job.status = ANY(%s::procrastinate_job_status[])
  AND COALESCE(
    (SELECT max(event.at) FROM procrastinate_events AS event WHERE event.job_id = job.id),
    job.scheduled_at
  ) < %s
ORDER BY job.id
LIMIT %s
"""
