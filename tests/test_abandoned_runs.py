"""Runs whose process is gone (issue 25, findings 9 and 14): a `runagent` process SIGKILLed in
the middle of its run, and a worker SIGKILLed with no other worker to recover its run. Real
processes on the test's database; the mock counts slowly, one run_code call a second."""

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from procrastinate.contrib.django.models import ProcrastinateWorker

from agent.abandoned import end_jobless_runs_without_a_process, stale_before
from agent.models import AgentRun
from agent.runs import new_conversation, start_run, submit_run
from core.events import ResumeReason, RunStatus
from tests.conftest import PROJECT_DIR, child_environment, others_gone, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "Count slowly to 5"
STALE_SECONDS = 2  # heartbeats every 2/3 s: a process is found gone within seconds


@pytest.fixture
def stale_soon(settings, worker_env) -> dict[str, str]:
    """The same LOOP_STALE_SECONDS here and in the child processes."""
    settings.LOOP_STALE_SECONDS = STALE_SECONDS
    return {**worker_env, "LOOP_STALE_SECONDS": str(STALE_SECONDS)}


@pytest.fixture
def start_runagent(stale_soon) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """`manage.py runagent ARGS` in a process group of its own; killed after the test."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        started.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "runagent", *args],
                cwd=PROJECT_DIR,
                env=child_environment(**stale_soon),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
        return started[-1]

    yield start
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=60)
    others_gone()


def sigkill(process: subprocess.Popen[str]) -> None:
    """Kill the process and its sandboxes at once, as the OOM killer or a lost machine would."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def calls_finished(run: AgentRun) -> int:
    return run.events.filter(kind="tool_call_finished").count()


def running_from_the_terminal(start_runagent, user: User) -> tuple[subprocess.Popen[str], AgentRun]:
    """A runagent process two calls into its run (so past its first heartbeats)."""
    process = start_runagent("--user", user.username, TASK)
    run = wait_for(lambda: AgentRun.objects.filter(user=user).first(), "the run to be stored")
    wait_for(lambda: calls_finished(run) >= 2, "two calls done", timeout=120)
    return process, run


def heartbeat_stale(run: AgentRun) -> bool:
    return AgentRun.objects.filter(pk=run.pk, heartbeat_at__lt=stale_before()).exists()


def calls_run_once(run: AgentRun) -> None:
    ended = Counter(run.events.filter(kind="tool_call_finished").values_list("data__call_id"))
    assert set(ended.values()) == {1}


def test_a_killed_runagents_run_holds_no_place_and_runagent_resume_takes_it_up(
    alice, settings, start_runagent, manage, stale_soon
):
    settings.LOOP_USER_ACTIVE_RUNS = 1
    process, run = running_from_the_terminal(start_runagent, alice)
    # Alive, it beats: past LOOP_STALE_SECONDS of work, nothing takes it for gone.
    assert end_jobless_runs_without_a_process() == 0
    assert status_of(run) == RunStatus.RUNNING

    sigkill(process)
    wait_for(lambda: heartbeat_stale(run), "its heartbeat to go stale")
    assert status_of(run) == RunStatus.RUNNING  # no worker: nothing recovered it

    # Its place is free: the person starts another run (the limit is one).
    other = start_run(alice, "What is 17 * 23?", model="mock")
    AgentRun.objects.filter(pk=other.pk).delete()

    resumed = manage("runagent", "--resume", str(run.pk), env=stale_soon)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "I counted to 5" in resumed.stdout
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    kinds = list(run.events.order_by("seq").values_list("kind", flat=True))
    assert kinds.count("run_finished") == 2  # interrupted, then continued to its end
    interrupted = run.events.filter(kind="run_finished").order_by("seq").first()
    assert interrupted.data["status"] == RunStatus.INTERRUPTED
    assert "stopped before it ended" in interrupted.data["error"]
    assert interrupted.data["answer"].startswith("Stopped before a final answer.")
    assert run.events.get(kind="run_resumed").data["reason"] == ResumeReason.CONTINUED
    calls_run_once(run)


def test_the_recovery_ends_a_killed_runagents_run_interrupted(
    alice, start_runagent, start_worker, stale_soon
):
    process, run = running_from_the_terminal(start_runagent, alice)
    start_worker(LOOP_STALE_SECONDS=str(STALE_SECONDS))
    sigkill(process)

    wait_for(lambda: status_of(run) == RunStatus.INTERRUPTED, "the recovery to end it")
    assert run.can_continue
    assert run.finished_at is not None
    assert run.answer.startswith("Stopped before a final answer.")
    assert "What worked: run_code" in run.answer
    assert "stopped before it ended" in run.error
    assert run.events.order_by("seq").last().kind == "run_finished"


def test_stop_on_a_dead_workers_run_ends_it_at_once_from_the_web(
    alice, as_alice, start_worker, stale_soon
):
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    worker = start_worker(LOOP_STALE_SECONDS=str(STALE_SECONDS))
    wait_for(lambda: calls_finished(run) >= 1, "the first call done", timeout=120)
    sigkill(worker)  # the only worker: nothing recovers the run
    wait_for(
        lambda: not ProcrastinateWorker.objects.filter(last_heartbeat__gte=stale_before()).exists(),
        "the worker's heartbeat to go stale",
    )
    assert status_of(run) == RunStatus.RUNNING
    attempt = run.attempt

    response = as_alice.post(f"/runs/{run.pk}/stop/", headers={"HX-Request": "true"})

    assert response.status_code == 200
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.CANCELLED, attempt + 1)
    assert run.answer.startswith("Stopped before a final answer.")
    assert "What worked: run_code" in run.answer
    assert run.iterations >= 1
    last = run.events.order_by("seq").last()
    assert (last.kind, last.data["status"]) == ("run_finished", RunStatus.CANCELLED)
    # A second Stop finds it ended, and changes nothing.
    as_alice.post(f"/runs/{run.pk}/stop/", headers={"HX-Request": "true"})
    assert run.events.order_by("seq").last().pk == last.pk
    assert AgentRun.objects.get(pk=run.pk).attempt == attempt + 1
