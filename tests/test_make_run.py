"""What `make run` starts, started the same way: honcho with the Procfile (a supervised daphne and
a supervised worker) on a free port, a data directory of its own, the keyless mock. A worker
killed mid-run is started again while the web keeps answering, a killed daphne is started again,
and Ctrl-C stops everything with the run handed back, for the next start to finish."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.events import ResumeReason, RunStatus
from agent.models import AgentRun
from agent.queue import WORK_RUN
from agent.runs import new_conversation, submit_run
from tests.conftest import PROJECT_DIR, OutputLines, child_environment, children, wait_for
from tests.socket_harness import free_port

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "Count slowly to 6"


class Stack:
    """One `make run`: honcho and every process under it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.honcho = subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "--procfile", "Procfile",
             "--port", str(self.port)],
            cwd=PROJECT_DIR,
            env=child_environment(**env, HOST="127.0.0.1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        self.output = OutputLines(self.honcho)

    @property
    def login_page(self) -> str:
        return f"http://127.0.0.1:{self.port}/accounts/login/"

    def answers(self) -> int | None:
        """The login page's HTTP status, or None if nothing answered."""
        try:
            with urllib.request.urlopen(self.login_page, timeout=10) as response:  # noqa: S310
                return response.status
        except OSError:
            return None

    def processes(self) -> dict[int, list[str]]:
        """Every process under honcho, with its command line."""
        found: dict[int, list[str]] = {}
        parents = [self.honcho.pid]
        while parents:
            below = children(parents.pop())
            found.update(below)
            parents.extend(below)
        return found

    def worker(self) -> int | None:
        """The supervised `manage.py worker` running now."""
        for pid, argv in self.processes().items():
            if argv[1:3] == [str(PROJECT_DIR / "manage.py"), "worker"]:
                return pid
        return None

    def daphne(self) -> int | None:
        """The supervised daphne serving now."""
        for pid, argv in self.processes().items():
            if any(Path(arg).name == "daphne" for arg in argv[:2]):
                return pid
        return None

    def ctrl_c(self) -> None:
        """What the terminal does at Ctrl-C: SIGINT to honcho's process group."""
        os.killpg(self.honcho.pid, signal.SIGINT)

    def gone(self) -> bool:
        return self.honcho.poll() is not None and not self.processes()


@pytest.fixture
def make_run(worker_env) -> Iterator[Callable[[], Stack]]:
    """Start `make run`'s processes (any number of times); all are stopped after the test."""
    var_dir = Path(tempfile.mkdtemp(prefix="loop-make-run-", dir="/tmp"))
    env = {**worker_env, "LOOP_VAR_DIR": str(var_dir), "LOOP_STALE_SECONDS": "3"}
    stacks: list[Stack] = []

    def start() -> Stack:
        stack = Stack(env)
        stacks.append(stack)
        wait_for(lambda: stack.answers() == 200, "the web to answer")
        wait_for(stack.worker, "the worker to start")
        return stack

    yield start
    for stack in stacks:
        if stack.honcho.poll() is None:
            stack.ctrl_c()
        stack.honcho.wait(timeout=60)
        wait_for(stack.gone, "every process of make run to stop")


class Watch:
    """GET the login page over and over from a thread, keeping each status."""

    def __init__(self, stack: Stack) -> None:
        self.statuses: list[int | None] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(stack,), daemon=True)
        self._thread.start()

    def _poll(self, stack: Stack) -> None:
        while not self._done.wait(0.1):
            self.statuses.append(stack.answers())

    def stop(self) -> list[int | None]:
        self._done.set()
        self._thread.join(timeout=60)
        return self.statuses


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def stepped(run: AgentRun) -> bool:
    return run.events.filter(kind="tool_call_finished").exists()


def test_a_killed_worker_is_started_again_and_resumes_its_run_while_the_web_answers(
    alice, make_run
):
    stack = make_run()
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    wait_for(lambda: stepped(run), "the run's first step")
    killed = stack.worker()
    watch = Watch(stack)

    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: stack.worker() not in (None, killed), "the worker to be started again")
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the run to be resumed and succeed")
    statuses = watch.stop()

    assert statuses, "the web was not asked while the worker was down"
    assert set(statuses) == {200}, statuses
    assert stack.honcho.poll() is None, stack.output.text
    [resumed] = run.events.filter(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.WORKER_LOST
    assert run.answer == "I counted to 6, one step a second."


def test_a_killed_web_server_is_started_again_and_the_site_answers(make_run):
    stack = make_run()
    killed = stack.daphne()

    os.kill(killed, signal.SIGKILL)

    wait_for(lambda: stack.daphne() not in (None, killed), "daphne to be started again")
    wait_for(lambda: stack.answers() == 200, "the site to answer again")
    assert stack.honcho.poll() is None, stack.output.text
    assert "was killed by SIGKILL; starting it again" in stack.output.text


def test_ctrl_c_mid_run_stops_everything_and_the_next_start_finishes_the_run(alice, make_run):
    stack = make_run()
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    wait_for(lambda: stepped(run), "the run's first step")
    worker = stack.worker()

    stack.ctrl_c()

    wait_for(stack.gone, "every process of make run to stop")
    log = stack.output.text
    # The worker says so instead, and exits 1, if its runs do not hand back within 9 s.
    assert f":{worker} stopped" in log, log
    assert "did not hand back" not in log, log
    assert "Traceback" not in log, log
    # Handed back: its job is queued again.
    assert ProcrastinateJob.objects.filter(
        task_name=WORK_RUN, args__run_id=run.pk, status="todo"
    ).exists()

    make_run()
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the next start to finish the run")
    [resumed] = run.events.filter(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.HANDED_BACK
