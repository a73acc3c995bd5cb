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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.models import AgentRun
from agent.queue import WORK_RUN
from agent.runs import new_conversation, submit_run
from core.events import ResumeReason, RunStatus
from tests.conftest import (
    CHILD_APPLICATION_NAME,
    PROJECT_DIR,
    OutputLines,
    child_environment,
    children,
    wait_for,
)
from tests.socket_harness import free_port
from tests.test_pool import Peak

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "Count slowly to 6"
# The most sessions `make run` holds whatever the load: the web's pool and the worker's
# (LOOP_DB_POOL_SIZE each), Procrastinate's pool (4) and its two listeners, and the web's LISTEN.
# Before the pools, each request in flight and each running run held one of its own.
OWN_SESSIONS = 4 + 2 + 1


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

    def page(self, path: str, session: str) -> int:
        """GET `path` as the person of this session cookie; the status."""
        url = f"http://127.0.0.1:{self.port}{path}"
        request = urllib.request.Request(url, headers={"Cookie": f"sessionid={session}"})
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return response.status

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
    assert stack.honcho.poll() is None
    # `output.text` waits for honcho to end; the lines read so far are enough here.
    assert stack.output.count("was killed by SIGKILL; starting it again") == 1


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


def database_sessions() -> int:
    """The sessions `make run`'s processes hold open on the database now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [CHILD_APPLICATION_NAME],
        )
        return cursor.fetchone()[0]


def session_of(user: User) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def test_a_burst_holds_no_more_sessions_than_the_pools_allow(alice, make_run, settings):
    bound = 2 * settings.LOOP_DB_POOL_SIZE + OWN_SESSIONS
    stack = make_run()
    people = [User.objects.create_user(f"person{n}") for n in range(4)]
    runs = [
        submit_run(
            person,
            f"Remember that my number {n} is {n * 7}",
            new_conversation(person),
            model="mock",
        )
        for person in people
        for n in range(2)
    ]
    session = session_of(alice)
    with Peak(CHILD_APPLICATION_NAME) as peak:
        with ThreadPoolExecutor(30) as pages:
            assert set(pages.map(lambda _: stack.page("/", session), range(120))) == {200}
        wait_for(lambda: all(status_of(run) == RunStatus.SUCCEEDED for run in runs), "the runs")

    # Each request and each run borrowed from its process's pool and gave it back.
    assert peak.samples > 5
    assert peak.most <= bound
    assert database_sessions() <= bound
