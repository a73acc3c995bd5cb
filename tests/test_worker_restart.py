"""A worker started on a host takes back at once the runs a dead worker of the same host left
`running` (issue 27): real `manage.py worker` processes on the test's database, a real
`kill -9`, and LOOP_STALE_SECONDS set to 120 in every process, so that within a test only the
new worker's own start can explain a resume (no heartbeat goes stale that soon). A live
worker's runs are left alone, and a pid reused by another process does not pass for the worker
that had it.

The model is the fake Groq server where a tool call must last (tests/groq_server.py); each call
appends a line to a file in the workspace, so a call run twice shows.
"""

import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from agent.abandoned import PID_REUSE_MARGIN, worker_process_gone
from agent.models import AgentRun, RunResume
from agent.runs import new_conversation, submit_run
from core.events import ResumeReason, RunStatus
from engine.tasks import reclaim_runs_of_dead_workers_here
from tests.conftest import OutputLines, wait_for
from tests.groq_server import (  # noqa: F401 (the fixture)
    FakeGroqServer,
    groq_server_fixture,
)
from tests.test_worker import (
    LONG_CALL,
    MODEL,
    TASK,
    call,
    executions,
    finishes,
    ledger,
    resumes,
    started,
    status_of,
    stopped,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Far beyond any wait of these tests: a worker's heartbeat cannot go stale within one.
STALE_SECONDS = 120
WAIT = 60.0  # seconds; every wait for a run is bounded well inside STALE_SECONDS
READY = "working up to"  # the worker's line once it has reclaimed and is taking jobs
CUT_OFF_CALL = "import time\ntime.sleep(600)\n"  # lasts until its worker is killed


@pytest.fixture
def on_groq(settings, groq_server: FakeGroqServer) -> dict[str, str]:
    """The fake Groq server as the model, and LOOP_STALE_SECONDS at 120, here and in the
    workers."""
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = MODEL
    settings.LOOP_STALE_SECONDS = STALE_SECONDS
    return {
        "GROQ_API_KEY": "gsk_test_key",
        "GROQ_BASE_URL": groq_server.base_url,
        "LOOP_GROQ_MODEL": MODEL,
        "LOOP_GROQ_REASONING_EFFORT": "low",
        "LOOP_GROQ_MAX_RETRIES": "0",
        "LOOP_STALE_SECONDS": str(STALE_SECONDS),
    }


@pytest.fixture
def stale_late(settings) -> dict[str, str]:
    settings.LOOP_STALE_SECONDS = STALE_SECONDS
    return {"LOOP_STALE_SECONDS": str(STALE_SECONDS)}


def here(pid: int) -> str:
    """The name a worker of this host with this pid gives its runs."""
    return f"{socket.gethostname()}:{pid}"


def test_a_worker_started_after_a_kill_takes_its_predecessor_s_run_back_at_once(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then=LONG_CALL)])
    groq_server.reply(tool_calls=[call("third")])
    groq_server.reply("All three steps ran; the second was cut off.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the 30-second call to start")

    first.send_signal(signal.SIGKILL)
    killed_at = timezone.now()
    stopped(first)
    second = start_worker(**on_groq)
    lines = OutputLines(second)

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run", timeout=WAIT)
    [resumed] = resumes(run)
    assert resumed["reason"] == ResumeReason.WORKER_LOST
    assert resumed["lost_worker"] == here(first.pid)
    [record] = RunResume.objects.filter(run=run)
    assert record.lost_worker == here(first.pid)
    # The first worker's heartbeat could not have been stale before this: only the second
    # worker's start took the run back.
    assert record.created_at < killed_at + timedelta(seconds=STALE_SECONDS)
    assert run.worker == here(second.pid)
    wait_for(lambda: lines.count("took back 1 run(s) of a dead worker"), "the worker's word")
    assert lines.count(f"its worker {here(first.pid)} is gone") == 1
    marks = ledger(workspaces, run)
    assert (marks["first"], marks["third"]) == (1, 1)
    assert marks["second"] <= 1
    assert executions(run)["call_first"] == executions(run)["call_third"] == 1
    assert max(executions(run).values()) == 1
    assert finishes(run) == {"call_first": 1, "call_second": 1, "call_third": 1}
    second_call = run.events.get(kind="tool_call_finished", data__call_id="call_second")
    assert second_call.data["status"] == "interrupted"


def test_a_worker_starting_beside_a_live_one_leaves_its_runs_alone(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then="import time\ntime.sleep(20)\n")])
    groq_server.reply("Both steps ran.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the second call to start")
    run.refresh_from_db()
    attempt, worker = run.attempt, run.worker

    beside = OutputLines(start_worker(**on_groq))
    wait_for(lambda: beside.count(READY), "the second worker to take jobs", timeout=WAIT)

    run.refresh_from_db()
    assert (run.status, run.attempt, run.worker) == (RunStatus.RUNNING, attempt, worker)
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the run to end", timeout=WAIT)
    assert run.worker == here(first.pid)
    assert run.attempt == attempt
    assert resumes(run) == []
    assert not beside.count("took back")
    assert ledger(workspaces, run) == {"first": 1, "second": 1}
    assert executions(run) == {"call_first": 1, "call_second": 1}


def test_a_live_worker_of_the_host_takes_a_dead_neighbour_s_run_at_its_next_recovery(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then=CUT_OFF_CALL)])
    groq_server.reply("Done; the second step was cut off.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the call that never ends to start")
    beside = start_worker(**on_groq)
    lines = OutputLines(beside)
    wait_for(lambda: lines.count(READY), "the second worker to take jobs", timeout=WAIT)

    first.send_signal(signal.SIGKILL)
    killed_at = timezone.now()
    stopped(first)

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run", timeout=WAIT)
    [resumed] = resumes(run)
    assert (resumed["reason"], resumed["lost_worker"]) == (
        ResumeReason.WORKER_LOST,
        here(first.pid),
    )
    assert RunResume.objects.get(run=run).created_at < killed_at + timedelta(seconds=STALE_SECONDS)
    assert run.worker == here(beside.pid)
    assert lines.count(f"its worker {here(first.pid)} is gone") == 1
    assert not lines.count("took back")  # not at its start: at a recovery, once the first died
    assert ledger(workspaces, run)["first"] == 1
    assert ledger(workspaces, run)["second"] <= 1
    assert max(executions(run).values()) == 1
    assert finishes(run) == {"call_first": 1, "call_second": 1}


def running_with_a_live_job(run: AgentRun, worker: str, claimed_at: Any) -> None:
    """Leave `run` as a worker named `worker` that claimed it at `claimed_at` would have: running,
    its job `doing` under a Procrastinate worker whose heartbeat is fresh (with LOOP_STALE_SECONDS
    at 120, the stale-worker recovery leaves it alone for the whole test)."""
    fetched_by_a_live_worker(run)
    AgentRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING,
        attempt=1,
        worker=worker,
        started_at=claimed_at,
        heartbeat_at=claimed_at,
    )


def test_a_pid_taken_over_by_a_newer_process_does_not_pass_for_its_worker(
    alice, bob, stale_late, start_worker
):
    claimed_at = timezone.now() - timedelta(seconds=PID_REUSE_MARGIN + 0.5)  # set back, not waited
    # A process that started after the claim, at the pid its run names: the pid was reused.
    newcomer = subprocess.Popen(["sleep", "300"])  # noqa: S607
    try:
        taken_over = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
        running_with_a_live_job(taken_over, here(newcomer.pid), claimed_at)
        # A process that was there before the claim (this one): it may well be that worker.
        alive = submit_run(bob, "What is 17 * 23?", new_conversation(bob), model="mock")
        running_with_a_live_job(alive, here(os.getpid()), claimed_at)

        worker = OutputLines(start_worker(**stale_late))

        wait_for(lambda: status_of(taken_over) == RunStatus.SUCCEEDED, "the run", timeout=WAIT)
        [resumed] = resumes(taken_over)
        assert resumed["reason"] == ResumeReason.WORKER_LOST
        assert resumed["lost_worker"] == here(newcomer.pid)
        wait_for(lambda: worker.count(READY), "the worker to take jobs")
    finally:
        newcomer.kill()
        newcomer.wait()
    alive.refresh_from_db()
    assert (alive.status, alive.attempt, alive.worker) == (
        RunStatus.RUNNING,
        1,
        here(os.getpid()),
    )
    assert resumes(alive) == []


def test_a_run_handed_over_is_not_handed_over_again_once_a_live_worker_fetched_its_job(alice):
    """The race CI once lost: the dead worker's run was handed a new job, a live worker fetched
    it (`doing`) and was about to claim the run, which still named the dead worker; the
    recovery then took the live worker's job away as if it were the dead one's, and the run was
    handed over twice."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    running_with_a_live_job(run, here(ended.pid), timezone.now())
    first_job = run.job_id

    assert reclaim_runs_of_dead_workers_here() == 1
    run.refresh_from_db()
    assert run.job_id != first_job
    fetched_by_a_live_worker(run)  # a live worker fetched the new job, not yet claimed

    assert reclaim_runs_of_dead_workers_here() == 0
    handed = run.job_id
    run.refresh_from_db()
    assert (run.job_id, run.worker) == (handed, here(ended.pid))  # left to the live worker


def fetched_by_a_live_worker(run: AgentRun) -> None:
    """The run's job `doing` under a Procrastinate worker whose heartbeat is fresh."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO procrastinate_workers DEFAULT VALUES RETURNING id")
        [worker_id] = cursor.fetchone()
        cursor.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = %s",
            [worker_id, run.job_id],
        )


def test_a_process_is_gone_when_it_has_ended_or_another_started_at_its_pid():
    before = timezone.now() - timedelta(seconds=PID_REUSE_MARGIN + 1)
    # This process started before `before`? Not necessarily: judge against a claim made now.
    now = timezone.now() + timedelta(seconds=PID_REUSE_MARGIN + 1)
    assert not worker_process_gone(here(os.getpid()), now)  # alive, there at the claim

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert worker_process_gone(here(ended.pid), now)  # no such process

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: zombie_state(zombie.pid), "the child to end, unreaped")
    try:
        assert worker_process_gone(here(zombie.pid), now)  # ended, waiting to be reaped
    finally:
        zombie.wait()

    newcomer = subprocess.Popen(["sleep", "300"])  # noqa: S607
    try:
        assert worker_process_gone(here(newcomer.pid), before)  # started after the claim
        assert not worker_process_gone(here(newcomer.pid), now)
    finally:
        newcomer.kill()
        newcomer.wait()
    assert not worker_process_gone("batch-1", now)  # a --name: no pid to judge by
    assert not worker_process_gone(here(os.getpid()), None)


def zombie_state(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
