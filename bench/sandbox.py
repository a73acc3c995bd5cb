"""Median latency of run_code(print(1)) under the sandbox against the same interpreter started bare.

    .venv/bin/python bench/sandbox.py [--runs 60]

Both sides go through the same process launcher and pipes; the runs alternate so machine noise
falls on both alike. The floor: the sandbox adds at most 30% over the bare interpreter start.

run_code starts the next sandbox for a workspace while the model takes its turn (tools.sandbox.
WarmSandboxes); a pause stands in for that turn, outside the timing. The cold figure, with no
sandbox started ahead, is printed too.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from tools.base import ToolContext, ToolRegistry  # noqa: E402
from tools.code import RUN_CODE  # noqa: E402
from tools.sandbox import WARM, Limits, execute, interpreter_arguments  # noqa: E402
from tools.workspace import ensure_workspace  # noqa: E402

SNIPPET = "print(1)"
MODEL_TURN = 0.1  # seconds between tool calls, untimed: a fast model's reply takes longer


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    runs = parser.parse_args().runs

    with tempfile.TemporaryDirectory(prefix="loop-bench-") as directory:
        workspace = ensure_workspace(Path(directory) / "workspace")
        context = ToolContext(user_id=0, username="bench", workspace=workspace)
        registry = ToolRegistry([RUN_CODE])
        arguments = '{"code": "print(1)"}'

        def sandboxed() -> None:
            result = registry.dispatch("run_code", arguments, context)
            assert result.ok, result
            assert result.policy == "bubblewrap", result

        def cold() -> None:
            WARM.drain()
            sandboxed()

        def bare() -> None:
            execution = execute(interpreter_arguments(), SNIPPET, Limits(), "bare", cwd=workspace)
            assert execution.stdout == "1\n", execution

        sides: dict[str, Callable[[], None]] = {"bare": bare, "cold": cold, "sandboxed": sandboxed}
        samples: dict[str, list[float]] = {name: [] for name in sides}
        for call in sides.values():
            call()
        for _ in range(runs):
            for name, call in sides.items():
                time.sleep(MODEL_TURN)
                samples[name].append(timed(call))
        WARM.drain()

    median_ms = {name: statistics.median(times) * 1000 for name, times in samples.items()}
    bare_ms, cold_ms, sandboxed_ms = median_ms["bare"], median_ms["cold"], median_ms["sandboxed"]
    print(f"runs per side:                             {runs}")
    print(f"bare interpreter, no sandbox (median):     {bare_ms:7.2f} ms")
    print(f"run_code, sandbox started cold (median):   {cold_ms:7.2f} ms")
    print(f"run_code, sandbox started ahead (median):  {sandboxed_ms:7.2f} ms")
    print(f"ratio cold run_code / bare:                {cold_ms / bare_ms:7.2f}x")
    print(f"ratio run_code / bare:                     {sandboxed_ms / bare_ms:7.2f}x")
    overhead = (sandboxed_ms / bare_ms - 1) * 100
    print(f"run_code overhead over bare:               {overhead:+7.1f}%  (floor: at most +30%)")


if __name__ == "__main__":
    main()
