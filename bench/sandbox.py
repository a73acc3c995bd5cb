"""Median latency of run_code(print(1)) as a run gets it, against the same interpreter started bare;
and the CPU a sandbox start costs.

    .venv/bin/python bench/sandbox.py [--runs 60] [--cpu-runs 60] [--project DIR]

The run_code figures are the durations a real run records for its tool calls: the loop works a
scripted task, each call in the loop's own tool thread, through the registry, the sandbox and the
workspace quota. "Started ahead" is a run's second call, served by the sandbox sandbox.pool.
WarmSandboxes started after its first (the bench checks that it was); "cold" is a call with
LOOP_SANDBOX_WARM off. A pause stands in for each model turn, outside the timing. The bare
interpreter goes through the same launcher and pipes, and the sides alternate so machine noise
falls on all of them alike. The floor: a call served ahead costs at most 30% over the bare start.

The CPU figures: `--cpu-runs` cold calls one after the other, then the CPU of every process of
the sandboxes (this process's children's, all reaped by it: as root it is their subreaper) and of
this process itself (the launcher, the cgroups, the pipes), per call. A demo run that calls
run_code once pays one start, and one more for the sandbox started ahead after it on a quiet
machine. `--project DIR` runs another tree's sandbox (say, a worktree of the code before a change)
with this bench.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def project_directory(argv: list[str]) -> Path:
    """The tree to run: --project, else this bench's own (read before Django loads either)."""
    if "--project" in argv[:-1]:
        return Path(argv[argv.index("--project") + 1]).resolve()
    return Path(__file__).resolve().parent.parent


PROJECT = project_directory(sys.argv)
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django  # noqa: E402 (after the tree is on sys.path)

django.setup()

from django.test import override_settings  # noqa: E402

from agent.llm.scripted import ScriptedLLM, answer, call  # noqa: E402
from core.events import Event, ToolCallFinished  # noqa: E402
from core.interrupt import Interrupt  # noqa: E402
from core.llm import Message, Reply, ToolSpec  # noqa: E402
from core.loop import Limits as RunLimits  # noqa: E402
from core.loop import run_agent  # noqa: E402
from sandbox.host import SandboxHost  # noqa: E402
from sandbox.interpreter import interpreter_arguments  # noqa: E402
from sandbox.policies import Limits  # noqa: E402
from sandbox.pool import WarmSandboxes  # noqa: E402
from tools.base import ToolContext, ToolRegistry  # noqa: E402
from tools.code import RUN_CODE  # noqa: E402
from workspace.directory import ensure_workspace  # noqa: E402

SNIPPET = "print(1)"
MODEL_TURN = 0.1  # seconds per model turn, untimed: a fast model's reply takes longer
BENCH_USER_ID = 0  # no account has id 0: the bench's snippets count against no user's budget


class PausingModel(ScriptedLLM):
    """Replays its replies, each after a pause as long as a fast model's turn."""

    def chat(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        timeout: float | None = None,
        interrupt: Interrupt | None = None,
    ) -> Reply:
        time.sleep(MODEL_TURN)
        return super().chat(messages, tools, timeout=timeout, interrupt=interrupt)


def run_code_durations(context: ToolContext, calls: int) -> list[float]:
    """Work a run of `calls` run_code calls; return what it recorded as each call's duration."""
    finished: list[ToolCallFinished] = []

    def sink(event: Event) -> None:
        if isinstance(event, ToolCallFinished):
            finished.append(event)

    replies = [call("run_code", {"code": SNIPPET})] * calls + [answer("Done.")]
    run_agent(
        "print 1",
        llm=PausingModel(replies),
        tools=ToolRegistry([RUN_CODE]).bind(context),
        sink=sink,
        limits=RunLimits(max_iterations=calls + 1),
    )
    assert [(e.status, e.policy) for e in finished] == [("ok", "bubblewrap")] * calls, finished
    assert all(json.loads(e.arguments)["code"] == SNIPPET for e in finished)
    return [event.duration for event in finished]


def cpu_seconds() -> tuple[float, float]:
    """CPU so far of this process's reaped children (the sandboxes), and of itself."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    itself = resource.getrusage(resource.RUSAGE_SELF)
    return children.ru_utime + children.ru_stime, itself.ru_utime + itself.ru_stime


def cpu_per_start(context: ToolContext, pool: WarmSandboxes, calls: int) -> tuple[float, float]:
    """CPU seconds per cold run_code call: the sandbox's processes, and this process's own."""
    pool.drain()
    with override_settings(LOOP_SANDBOX_WARM=False):
        run_code_durations(context, 1)  # the first call of a process loads what it needs
        time.sleep(0.5)
        sandboxes, itself = cpu_seconds()
        for _ in range(calls):  # a run each: the loop refuses a call repeated too often
            run_code_durations(context, 1)
        time.sleep(0.5)  # what outlives a call (the saver, bwrap's init) is reaped by now
    after = cpu_seconds()
    return (after[0] - sandboxes) / calls, (after[1] - itself) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--cpu-runs", type=int, default=60)
    parser.add_argument("--project", type=Path, default=PROJECT, help="the tree to run")
    arguments = parser.parse_args()
    runs = arguments.runs

    with tempfile.TemporaryDirectory(prefix="loop-bench-") as directory, SandboxHost() as host:
        workspace = ensure_workspace(Path(directory) / "workspace", BENCH_USER_ID)
        context = ToolContext(BENCH_USER_ID, "bench", workspace, sandbox=host)
        pool = host.pool  # the sandboxes started ahead

        def bare() -> float:
            started = time.perf_counter()
            launched = host.launcher.start(interpreter_arguments(), Limits(), workspace).result()
            execution = launched.finish(SNIPPET, Limits(), "bare")
            assert execution.stdout == "1\n", execution
            return time.perf_counter() - started

        def cold() -> float:
            pool.drain()  # the sandbox the last run left waiting would serve this call
            with override_settings(LOOP_SANDBOX_WARM=False):
                return run_code_durations(context, 1)[0]

        def started_ahead() -> float:
            pool.drain()  # the run's first call starts cold; the second must be served ahead
            served = pool.served
            _, second = run_code_durations(context, 2)
            assert pool.served == served + 1, "the second call was not served ahead"
            return second

        samples: dict[str, list[float]] = {"bare": [], "cold": [], "ahead": []}
        sides = {"bare": bare, "cold": cold, "ahead": started_ahead}
        for side in sides.values():
            side()  # warm the page cache and the imports, untimed
        for _ in range(runs):
            for name, side in sides.items():
                time.sleep(MODEL_TURN)
                samples[name].append(side())
        pool.drain()
        sandboxes_cpu, own_cpu = cpu_per_start(context, pool, arguments.cpu_runs)

    median_ms = {name: statistics.median(times) * 1000 for name, times in samples.items()}
    bare_ms, cold_ms, ahead_ms = median_ms["bare"], median_ms["cold"], median_ms["ahead"]
    print(f"tree:                                      {PROJECT}")
    print(f"runs per side:                             {runs}")
    print(f"bare interpreter, no sandbox (median):     {bare_ms:7.2f} ms")
    print(f"run_code, sandbox started cold (median):   {cold_ms:7.2f} ms")
    print(f"run_code, sandbox started ahead (median):  {ahead_ms:7.2f} ms")
    print(f"ratio cold run_code / bare:                {cold_ms / bare_ms:7.2f}x")
    print(f"ratio run_code / bare:                     {ahead_ms / bare_ms:7.2f}x")
    overhead = (ahead_ms / bare_ms - 1) * 100
    print(f"run_code overhead over bare:               {overhead:+7.1f}%  (floor: at most +30%)")
    print(f"CPU a cold call, its sandbox's processes:  {sandboxes_cpu * 1000:7.2f} ms")
    print(f"CPU a cold call, this process's own:       {own_cpu * 1000:7.2f} ms")


if __name__ == "__main__":
    main()
