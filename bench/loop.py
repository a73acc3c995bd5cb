"""The loop's own overhead per step: an instant model, a no-op tool, nothing else to wait for.

    .venv/bin/python bench/loop.py [--repeats 5]

Each step is one model turn asking for one tool call and that call's result. Two sinks:
(a) events kept in memory; (b) every event persisted to PostgreSQL by the recorder real runs use,
with their cancel check against the database. Recalling memories before the first step and
remembering the outcome after the last are per run, not per step, and are left out
(bench/memory.py times recall). Runs of 20 and 200 steps show whether a step's cost grows with
the history; persisting appends, so it should not. A third line runs the in-memory case with the
tool in the backstop thread every real tool runs in (tools.base.Tool.own_deadline), to show what
that thread costs.
Floors: (a) under 100 µs per step, (b) under 2 ms, and 200 steps within 1.3x of 20 per step.
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from agent.events import Event, RunStatus  # noqa: E402
from agent.execution import cancel_flag  # noqa: E402
from agent.llm.base import Message, Reply, ToolCall, ToolSpec  # noqa: E402
from agent.loop import Limits, run_agent  # noqa: E402
from agent.models import AgentRun  # noqa: E402
from agent.recorder import RunRecorder  # noqa: E402
from agent.runs import start_run  # noqa: E402
from tools.base import Tool, ToolContext, ToolRegistry  # noqa: E402


class NoopArguments(BaseModel):
    n: int


# It cannot hang, so it needs no backstop thread (tools.base.Tool.own_deadline).
NOOP = Tool("noop", "Does nothing.", NoopArguments, lambda args, context: "ok", own_deadline=True)


class InstantLLM:
    """Replies at once from a list built ahead: `steps` calls to noop, then an answer."""

    provider = "bench"
    model = "instant"

    def __init__(self, steps: int) -> None:
        self.replies = [
            Reply(tool_calls=(ToolCall(f"call_{n}", "noop", json.dumps({"n": n})),))
            for n in range(steps)
        ] + [Reply(text="done")]
        self.turn = 0

    def chat(
        self, messages: list[Message], tools: list[ToolSpec] | None, *, timeout: float | None = None
    ) -> Reply:
        self.turn += 1
        return self.replies[self.turn - 1]


def limits(steps: int) -> Limits:
    return Limits(max_iterations=steps + 1, max_tool_calls=steps, max_identical_calls=steps + 1)


def tools(tool: Tool = NOOP) -> object:
    return ToolRegistry([tool]).bind(ToolContext(0, "bench", Path("/nonexistent")))


def in_memory_backstop(steps: int) -> float:
    """The same no-op tool run as every real tool is, in a backstop thread (not a floor)."""
    return in_memory(steps, dataclasses.replace(NOOP, own_deadline=False))


def in_memory(steps: int, tool: Tool = NOOP) -> float:
    events: list[Event] = []
    llm = InstantLLM(steps)
    started = time.perf_counter()
    result = run_agent(
        "bench", llm=llm, tools=tools(tool), sink=events.append, limits=limits(steps)
    )
    elapsed = time.perf_counter() - started
    assert result.status is RunStatus.SUCCEEDED, result
    return elapsed / steps


def persisted(steps: int) -> float:
    user, _ = get_user_model().objects.get_or_create(username="bench")
    run = start_run(user, "bench", model="mock", limits=limits(steps))
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)  # as execute_run claims it
    llm, bound, recorder, cancelled = (
        InstantLLM(steps),
        tools(),
        RunRecorder(run),
        cancel_flag(run, None),
    )
    started = time.perf_counter()
    result = run_agent(
        "bench", llm=llm, tools=bound, sink=recorder, limits=limits(steps), cancelled=cancelled
    )
    elapsed = time.perf_counter() - started
    assert result.status is RunStatus.SUCCEEDED, result.error
    assert run.tool_executions.count() == steps
    return elapsed / steps


def median_per_step(measure: Callable[[int], float], steps: int, repeats: int) -> float:
    measure(steps)  # warm up: imports, caches, connections
    return statistics.median(measure(steps) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    floors = {"in memory": 100e-6, "PostgreSQL": 2e-3}
    print(f"{'sink':<12}{'20 steps':>14}{'200 steps':>14}{'200/20':>9}  floor")
    try:
        sinks = (
            ("in memory", in_memory),
            ("PostgreSQL", persisted),
            ("+ backstop", in_memory_backstop),
        )
        for name, measure in sinks:
            short = median_per_step(measure, 20, repeats * 10)
            long = median_per_step(measure, 200, repeats)
            ratio = long / short
            figures = f"{name:<12}{short * 1e6:>11.1f} µs{long * 1e6:>11.1f} µs{ratio:>8.2f}x  "
            if name not in floors:
                print(figures + "(no floor: for comparison)")
                continue
            ok = max(short, long) < floors[name] and ratio <= 1.3
            verdict = "met" if ok else "MISSED"
            print(figures + f"< {floors[name] * 1e6:g} µs/step, <= 1.3x: {verdict}")
    finally:
        get_user_model().objects.filter(username="bench").delete()  # its runs and memories too


if __name__ == "__main__":
    main()
