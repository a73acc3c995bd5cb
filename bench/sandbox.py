"""Median latency of run_code(print(1)) under the sandbox against the same interpreter started bare.

    .venv/bin/python bench/sandbox.py [--runs 60]

Both sides go through the same process launcher and pipes; the runs alternate so machine noise
falls on both alike. The floor: the sandbox adds at most 30% over the bare interpreter start.
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
from tools.sandbox import Limits, execute, interpreter_arguments  # noqa: E402
from tools.workspace import ensure_workspace  # noqa: E402

SNIPPET = "print(1)"


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

        def bare() -> None:
            execution = execute(interpreter_arguments(), SNIPPET, Limits(), "bare", cwd=workspace)
            assert execution.stdout == "1\n", execution

        for warm_up in (sandboxed, bare):
            warm_up()
        samples: dict[str, list[float]] = {"sandboxed": [], "bare": []}
        for _ in range(runs):
            samples["sandboxed"].append(timed(sandboxed))
            samples["bare"].append(timed(bare))

    sandboxed_ms = statistics.median(samples["sandboxed"]) * 1000
    bare_ms = statistics.median(samples["bare"]) * 1000
    print(f"runs per side:                {runs}")
    print(f"bare interpreter   (median):  {bare_ms:7.2f} ms")
    print(f"run_code, sandboxed (median): {sandboxed_ms:7.2f} ms")
    print(f"ratio sandboxed / bare:       {sandboxed_ms / bare_ms:7.2f}x")
    print(
        f"overhead:                     {(sandboxed_ms / bare_ms - 1) * 100:+7.1f}%  (floor: +30%)"
    )


if __name__ == "__main__":
    main()
