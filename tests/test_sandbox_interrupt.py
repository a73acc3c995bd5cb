"""Stopping a run kills its snippets at once: kill_run from another thread (the run's watcher)
ends each sandbox running for that run, its result says so, and what it wrote is kept."""

import dataclasses
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from core.results import ToolResult, ToolStatus
from sandbox.policies import Limits
from tools.base import ToolContext, ToolRegistry
from tools.code import RUN_CODE, STOPPED

from .conftest import wait_for
from .sandboxes import SANDBOX, bubblewrap
from .test_run_code import assert_no_sandbox_process_remains, user_context

RUNNING, kill_run = SANDBOX.running, SANDBOX.kill_run  # the tests' host's

# Prints "ready" (unbuffered) once it runs, then holds its sandbox far longer than any test waits.
LONG_SNIPPET = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"


@pytest.fixture(params=["bubblewrap", "subprocess"])
def sandbox_kind(request, settings) -> str:
    settings.LOOP_SANDBOX = request.param
    return request.param


@pytest.fixture
def context(workspaces: Path) -> ToolContext:
    return dataclasses.replace(user_context(workspaces), run_id=fresh_run_id())


def fresh_run_id() -> int:
    return 1_000_000 + secrets.randbelow(1_000_000_000)


def run(context: ToolContext, code: str, timeout: int = 60) -> ToolResult:
    arguments = json.dumps({"code": code, "timeout": timeout})
    return ToolRegistry([RUN_CODE]).dispatch("run_code", arguments, context)


def snippets_ready(run_id: int) -> int:
    """How many of the run's sandboxes are running their snippet now (it has printed "ready")."""
    with RUNNING.lock:
        sandboxes = list(RUNNING.by_run.get(run_id, ()))
    return sum(b"ready" in b"".join(sandbox.stdout.chunks) for sandbox in sandboxes)


def kill_when_ready(run_id: int, target: int | None = None, ready: int = 1) -> Future[int]:
    """From a timer thread, as the run's watcher would: once `ready` snippets of the run are
    running, kill_run(target, the run itself unless given); the future holds what it returned."""
    killed: Future[int] = Future()

    def kill() -> None:
        try:
            wait_for(lambda: snippets_ready(run_id) >= ready, "the snippets to be running", 60)
            killed.set_result(kill_run(run_id if target is None else target))
        except BaseException as error:
            killed.set_exception(error)

    timer = threading.Timer(0.05, kill)
    timer.start()
    return killed


def timed(call: Callable[[], ToolResult]) -> tuple[ToolResult, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def assert_stopped(result: ToolResult) -> None:
    assert result.status is ToolStatus.ERROR
    assert result.text.startswith(STOPPED)
    assert "exit status: killed" in result.text
    assert "ready" in result.text  # what it printed before it was killed
    assert "timeout" not in result.text


def test_a_stopped_runs_long_snippet_is_killed_at_once(context, sandbox_kind):
    killed = kill_when_ready(context.run_id)

    result, seconds = timed(lambda: run(context, LONG_SNIPPET))

    assert killed.result(timeout=30) == 1
    assert_stopped(result)
    assert seconds < 20  # a generous bound: the snippet would have slept 30 s
    assert context.run_id not in RUNNING.by_run
    assert_no_sandbox_process_remains(context)


def test_what_a_killed_snippet_wrote_is_kept(context, sandbox_kind):
    code = "with open('progress.txt', 'w') as file:\n    file.write('halfway\\n')\n" + LONG_SNIPPET
    killed = kill_when_ready(context.run_id)

    result = run(context, code)

    assert killed.result(timeout=30) == 1
    assert_stopped(result)
    assert (context.workspace / "progress.txt").read_text() == "halfway\n"


def test_killing_another_run_leaves_the_snippet_running_to_its_end(context, sandbox_kind):
    code = "import time\nprint('ready', flush=True)\ntime.sleep(3)\nprint('done')\n"
    other_run = context.run_id + 1
    killed = kill_when_ready(context.run_id, target=other_run)
    still_running: list[bool] = []
    killed.add_done_callback(lambda _: still_running.append(snippets_ready(context.run_id) == 1))

    result = run(context, code)

    assert killed.result(timeout=30) == 0
    assert still_running == [True]  # the other run's kill came while this snippet ran
    assert result.status is ToolStatus.OK, result.text
    assert "done" in result.text


def test_kill_run_with_nothing_running_kills_nothing():
    assert kill_run(fresh_run_id()) == 0


def test_both_parallel_snippets_of_a_stopped_run_are_killed(context, sandbox_kind):
    killed = kill_when_ready(context.run_id, ready=2)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run(context, LONG_SNIPPET), range(2)))

    assert killed.result(timeout=30) == 2
    for result in results:
        assert_stopped(result)
    assert_no_sandbox_process_remains(context)


def test_a_snippet_reaching_its_sandbox_after_the_stop_is_killed_at_once(context, sandbox_kind):
    """kill_run looked before this snippet had a sandbox: the run's stop flag catches it."""
    assert kill_run(context.run_id) == 0
    stopped_context = dataclasses.replace(context, stopped=lambda: True)

    result, seconds = timed(lambda: run(stopped_context, "import time\ntime.sleep(30)\n"))

    assert result.status is ToolStatus.ERROR
    assert result.text.startswith(STOPPED)
    assert seconds < 20
    assert_no_sandbox_process_remains(context)


def test_kills_racing_snippets_ending_on_their_own_never_fail(context, sandbox_kind):
    """A kill as a snippet ends either finds it still running (stopped) or leaves its result."""
    done = threading.Event()
    failures: list[BaseException] = []
    kills = []

    def hammer() -> None:
        while not done.is_set():
            try:
                kills.append(kill_run(context.run_id))
                time.sleep(secrets.randbelow(50) / 1000)  # now early in a snippet, now at its end
            except BaseException as error:
                failures.append(error)
                return

    killer = threading.Thread(target=hammer)
    killer.start()
    try:
        results = [run(context, "print('quick')") for _ in range(20)]
    finally:
        done.set()
        killer.join()

    assert failures == []
    for result in results:
        assert result.status is ToolStatus.OK or result.text.startswith(STOPPED), result.text
    assert sum(kills) == sum(not result.ok for result in results)
    assert_no_sandbox_process_remains(context)


def ended_unreaped(pid: int) -> bool:
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def test_a_sandbox_that_ended_is_never_signalled(context):
    """Its pid stays unreaped until finish reaps it; stop() after its end changes nothing."""
    limits = Limits()
    sandbox = bubblewrap().launch(context.workspace, limits).result()
    assert sandbox.process.stdin is not None
    with sandbox.process.stdin:
        sandbox.process.stdin.write(b"print('ended on its own')")
    wait_for(lambda: ended_unreaped(sandbox.process.pid), "the sandbox to end")

    assert sandbox.stop() is False
    sandbox.reap()
    sandbox.stdout.join()
    assert not sandbox.stopped
    assert sandbox.process.returncode == 0
    assert b"".join(sandbox.stdout.chunks) == b"ended on its own\n"
    sandbox.release_memory(limits)  # what finish does after the reap: no cgroup is left
    if sandbox.saver is not None:
        sandbox.saver.close()
