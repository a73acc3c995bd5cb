"""Median latency of run_code(print(1)) as a run gets it, against the same interpreter started bare.

    .venv/bin/python bench/sandbox.py [--runs 60]

The run_code figures are the durations a real run records for its tool calls: the loop works a
scripted task, each call in the loop's own tool thread, through the registry, the sandbox and the
workspace quota. "Started ahead" is a run's second call, served by the sandbox tools.sandbox.
WarmSandboxes started after its first (the bench checks that it was); "cold" is a call with
LOOP_SANDBOX_WARM off. A pause stands in for each model turn, outside the timing. The bare
interpreter goes through the same launcher and pipes, and the sides alternate so machine noise
falls on all of them alike. The floor: a call served ahead costs at most 30% over the bare start.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.test import override_settings  # noqa: E402

from agent.core.events import Event, ToolCallFinished  # noqa: E402
from agent.core.interrupt import Interrupt  # noqa: E402
from agent.core.llm import Message, Reply, ToolSpec  # noqa: E402
from agent.core.loop import Limits as RunLimits  # noqa: E402
from agent.core.loop import run_agent  # noqa: E402
from agent.llm.scripted import ScriptedLLM, answer, call  # noqa: E402
from tools.base import ToolContext, ToolRegistry  # noqa: E402
from tools.code import RUN_CODE  # noqa: E402
from tools.sandbox import WARM, Limits, execute, interpreter_arguments  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    runs = parser.parse_args().runs

    with tempfile.TemporaryDirectory(prefix="loop-bench-") as directory:
        workspace = ensure_workspace(Path(directory) / "workspace", BENCH_USER_ID)
        context = ToolContext(user_id=BENCH_USER_ID, username="bench", workspace=workspace)

        def bare() -> float:
            started = time.perf_counter()
            execution = execute(interpreter_arguments(), SNIPPET, Limits(), "bare", cwd=workspace)
            assert execution.stdout == "1\n", execution
            return time.perf_counter() - started

        def cold() -> float:
            WARM.drain()  # the sandbox the last run left waiting would serve this call
            with override_settings(LOOP_SANDBOX_WARM=False):
                return run_code_durations(context, 1)[0]

        def started_ahead() -> float:
            WARM.drain()  # the run's first call starts cold; the second must be served ahead
            served = WARM.served
            _, second = run_code_durations(context, 2)
            assert WARM.served == served + 1, "the second call was not served ahead"
            return second

        samples: dict[str, list[float]] = {"bare": [], "cold": [], "ahead": []}
        sides = {"bare": bare, "cold": cold, "ahead": started_ahead}
        for side in sides.values():
            side()  # warm the page cache and the imports, untimed
        for _ in range(runs):
            for name, side in sides.items():
                time.sleep(MODEL_TURN)
                samples[name].append(side())
        WARM.drain()

    median_ms = {name: statistics.median(times) * 1000 for name, times in samples.items()}
    bare_ms, cold_ms, ahead_ms = median_ms["bare"], median_ms["cold"], median_ms["ahead"]
    print(f"runs per side:                             {runs}")
    print(f"bare interpreter, no sandbox (median):     {bare_ms:7.2f} ms")
    print(f"run_code, sandbox started cold (median):   {cold_ms:7.2f} ms")
    print(f"run_code, sandbox started ahead (median):  {ahead_ms:7.2f} ms")
    print(f"ratio cold run_code / bare:                {cold_ms / bare_ms:7.2f}x")
    print(f"ratio run_code / bare:                     {ahead_ms / bare_ms:7.2f}x")
    overhead = (ahead_ms / bare_ms - 1) * 100
    print(f"run_code overhead over bare:               {overhead:+7.1f}%  (floor: at most +30%)")


if __name__ == "__main__":
    main()
