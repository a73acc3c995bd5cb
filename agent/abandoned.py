"""Runs still `running` whose process is gone: a worker whose heartbeat is stale (or whose row
is gone), a worker of this host whose pid no longer runs, a job that ended before its run, a
`runagent` process whose run's heartbeat is stale.
Found here, and ended on the lost process's behalf from the run's log: fenced first (the attempt
moves on, so the process, if it was only cut off, can write nothing more), then recorded as any
end is, with what the run had done so far.
"""

import os
import socket
import time
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q, QuerySet
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from procrastinate.contrib.django.models import ProcrastinateJob, ProcrastinateWorker

from agent.models import AgentRun
from agent.recorder import RunRecorder
from core.ending import run_end
from core.events import EndCause, RunFinished, RunStatus, event_from_dict
from core.state import RunState, replay
from sandbox.fence import raise_fence
from workspace.directory import workspace_path


def stale_before() -> ExpressionWrapper[CombinedExpression]:
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


# A process at a dead worker's pid that started this much later than the run was claimed is
# another process that took the pid over, not the worker (a process's start is known to the
# clock tick, the claim to the microsecond; both on this host's clock).
PID_REUSE_MARGIN = 1.0


def runs_of_gone_processes_here() -> list[tuple[int, int, str]]:
    """(run, job, worker) of each run a worker of this host was working when its process ended:
    the run is `running`, its job is still `doing` (nobody finished it), and its `worker`,
    `host:pid`, names this host and a pid where that worker no longer runs
    (`worker_process_gone`). Found at once, where its heartbeat would take LOOP_STALE_SECONDS
    to say so: a worker of this host that starts, and the recovery on one, hand them over
    (engine/tasks.py). A worker given a `--name` of its own names no pid, and is left to its
    heartbeat. A run handed over and not claimed since has no claim time: its new job, `doing`
    once a live worker has fetched it, is that worker's, not the dead one's."""
    doing = ProcrastinateJob.objects.filter(status="doing").values("id")
    here = AgentRun.objects.filter(
        status=RunStatus.RUNNING, job_id__in=doing, worker__startswith=f"{socket.gethostname()}:"
    )
    rows = here.values_list("pk", "job_id", "worker", "heartbeat_at")
    return [
        (pk, job, worker)
        for pk, job, worker, claimed in rows
        if job is not None and worker_process_gone(worker, claimed)
    ]


def worker_process_gone(worker: str, claimed_at: datetime | None) -> bool:
    """Whether the process `worker` (`host:pid`, of this host) that claimed its run at
    `claimed_at` has ended. A pid is reused once its process is gone, so a process found there
    is that worker only if it had started by the claim: one that started after it (this very
    worker, restarted under the same pid in a new container, say) is another process."""
    _, _, pid = worker.rpartition(":")
    if not pid.isdigit() or claimed_at is None:
        return False
    started = process_started_at(int(pid))
    if started is None:
        return True
    return started > claimed_at.timestamp() + PID_REUSE_MARGIN


def process_started_at(pid: int) -> float | None:
    """When process `pid` started (epoch seconds); None if there is none (a zombie is none:
    it has ended and waits only to be reaped). Read from /proc; where there is no /proc, a
    process that exists is taken to have started long ago (it is never judged a newcomer)."""
    if not Path("/proc/self/stat").exists():
        return 0.0 if _exists(pid) else None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as it was read
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    if fields[0] in ("Z", "X"):
        return None
    ticks_after_boot = int(fields[19])  # field 22, starttime
    return time.time() - (uptime - ticks_after_boot / os.sysconf("SC_CLK_TCK"))


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        pass
    return True


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
    return run_end(state or RunState(), status, error=error, cause=cause)
