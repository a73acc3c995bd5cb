"""The sandbox started ahead: it outlives the thread that asked for it, serves a real run's next
run_code, holds up under parallel calls, and dies with its worker, a SIGKILLed one included."""

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.runs import start_run
from core.events import RunStatus
from engine.execution import execute_run
from sandbox.policies import Limits
from sandbox.process import Launched
from workspace.directory import sandbox_identity, workspace_path

from .conftest import PROJECT_DIR, child_environment, wait_for
from .sandboxes import SANDBOX, bubblewrap
from .test_run_code import run, sandbox_processes, user_context

WARM = SANDBOX.pool  # the sandboxes the tests' host started ahead


@pytest.fixture
def context(workspaces: Path):
    return user_context(workspaces)


def is_snippet_interpreter(process: psutil.Process) -> bool:
    """The interpreter a snippet runs in: a child of bwrap's namespace init, itself bwrap's child
    (what else of the sandbox's uid runs Python is the workspace quota's saver)."""
    try:
        parent = process.parent()
        return (
            process.name().startswith("python")
            and parent is not None
            and parent.name() == "bwrap"
            and parent.parent() is not None
            and parent.parent().name() == "bwrap"
        )
    except psutil.NoSuchProcess:
        return False


def interpreter_up(sandbox: Launched) -> bool:
    """Its interpreter has started: every process of the sandbox is up and bound to its parent."""
    try:
        descendants = psutil.Process(sandbox.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    return any(is_snippet_interpreter(process) for process in descendants)


def test_a_sandbox_outlives_the_thread_that_asked_for_it(context):
    """The root of the warm sandbox's death: --die-with-parent follows the thread that forked."""
    limits = Limits()
    asked: dict[str, Launched] = {}

    def ask() -> None:
        sandbox = bubblewrap().launch(context.workspace, limits).result()
        wait_for(lambda: interpreter_up(sandbox), "the sandbox's interpreter to start", 30)
        asked["sandbox"] = sandbox

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()  # the thread that asked has ended, after the sandbox was fully up
    execution = asked["sandbox"].finish("print('still here')", limits, "bubblewrap")
    assert (execution.exit_status, execution.stdout) == (0, "still here\n")


class ModelTakingItsTurn(ScriptedLLM):
    """Replies only once the last tool call's thread has ended and the sandbox started ahead is
    up, as a real model's turn (seconds) would let happen."""

    def chat(self, messages, tools, *, timeout=None, interrupt=None):
        if self.turns:
            wait_for(
                lambda: not any(t.name == "tool-run_code" for t in threading.enumerate()),
                "the last run_code call's thread to end",
            )
            wait_for(
                lambda: (
                    WARM.idle
                    and all(interpreter_up(warm.sandbox.result()) for warm in WARM.idle.values())
                ),
                "the sandbox started ahead to be up",
            )
        return super().chat(messages, tools, timeout=timeout)


@pytest.mark.django_db
def test_a_runs_second_run_code_is_served_by_the_sandbox_started_ahead(alice, workspaces):
    served = WARM.served
    model = ModelTakingItsTurn(
        [
            call("run_code", {"code": "print('first')"}),
            call("run_code", {"code": "print('second')"}),
            answer("Both ran."),
        ]
    )
    queued = start_run(alice, "Run two snippets", model="mock")
    run_record = execute_run(queued, llm=model, sandbox=SANDBOX)
    assert run_record.status == RunStatus.SUCCEEDED
    executions = run_record.tool_executions.order_by("step")
    assert [(e.status, e.policy) for e in executions] == [("ok", "bubblewrap")] * 2
    assert "second" in executions.last().result
    assert WARM.served == served + 1
    assert (workspace_path(alice.pk), Limits.from_settings(10)) in WARM.idle  # for a third call


def test_80_parallel_calls_with_sandboxes_started_ahead_all_succeed(workspaces):
    """80 calls at once, twice over: ten users, eight each, the most one user can have (two runs
    of four parallel calls); the second wave finds sandboxes started ahead."""
    users = [user_context(workspaces, f"user{n}") for n in range(10)]
    served = WARM.served
    uids = {sandbox_identity(user.user_id).uid for user in users}
    done = threading.Event()
    orphaned: list[str] = []
    scans = []

    def watch_for_orphans() -> None:
        """What outlives its parent comes to this process, never to PID 1 (which may reap it
        late, leaving a zombie that counts against its user's budget)."""
        while not done.wait(0.005):
            for process in psutil.process_iter(["uids", "ppid", "name"]):
                info = process.info
                if info["uids"] and info["uids"].real in uids and info["ppid"] == 1:
                    orphaned.append(info["name"])
            scans.append(1)

    def call_number(n: int) -> tuple[int, str, str]:
        result = run(users[n % 10], f"print({n} * 3)", timeout=60)  # a slow machine is no fault
        return n, result.status, result.text

    watcher = threading.Thread(target=watch_for_orphans)
    watcher.start()
    with ThreadPoolExecutor(80) as pool:
        results = list(pool.map(call_number, range(160)))
    done.set()
    watcher.join()
    failed = [(n, status, text[:300]) for n, status, text in results if f"\n{n * 3}\n" not in text]
    assert failed == []
    assert WARM.served > served  # sandboxes started ahead served some of them, in parallel
    assert scans
    assert orphaned == []


WORKER = """
import json, sys
from pathlib import Path

import django

django.setup()

from sandbox.host import SandboxHost
from tools.base import ToolContext, ToolRegistry
from tools.code import RUN_CODE
from workspace.directory import ensure_workspace

user_id, workspaces = int(sys.argv[1]), Path(sys.argv[2])
workspace = ensure_workspace(workspaces / str(user_id), user_id)
sandbox = SandboxHost()  # the worker's own
context = ToolContext(user_id=user_id, username="worker", workspace=workspace, sandbox=sandbox)
registry = ToolRegistry([RUN_CODE])
assert registry.dispatch("run_code", json.dumps({"code": "print(1)"}), context).ok
print("a sandbox waits for the next call", flush=True)
snippet = {"code": "import time; time.sleep(600)", "timeout": 60}
registry.dispatch("run_code", json.dumps(snippet), context)
"""


def test_no_sandbox_process_outlives_a_sigkilled_worker(workspaces):
    worker_context = user_context(workspaces)  # only its uid: the worker makes its own workspace
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(worker_context.user_id), str(workspaces)],
        cwd=PROJECT_DIR,
        env=child_environment(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline() == "a sandbox waits for the next call\n"
        wait_for(
            lambda: (
                len([p for p in sandbox_processes(worker_context) if is_snippet_interpreter(p)])
                == 2
            ),
            "the idle sandbox and the one running a snippet",
            60,
        )
    finally:
        worker.kill()  # SIGKILL: nothing of the worker's own runs to clean up
        worker.wait()
    wait_for(
        lambda: not sandbox_processes(worker_context),
        "every process of the killed worker's sandboxes to end",
        30,
    )
