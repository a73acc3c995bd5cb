"""What counting costs a run's step: bench/loop.py's persisted step (an instant model, a no-op
tool, every event recorded in PostgreSQL) with metrics off and on, side by side in one run.

    .venv/bin/python bench/metrics.py [--repeats 9] [--steps 30]

Off is how a site without LOOP_METRICS_TOKEN runs: no observer hears the run. On is how one with
it runs: every process counts in files of prometheus-client's multiprocess mode (a directory of
this bench's own), heard after each committed batch (metrics.heard). Rounds alternate which goes
first, so a noisy neighbour weighs on both alike. Medians per step, in µs.

On a busy machine a step's wall time varies by more than counting costs, so the two medians may
differ either way by more than it; the figure held to the floor is the observer's own time, timed
around each call it gets: at most 5% of a step with metrics off (the issue's floor, for metrics
and traces together, on throughput).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from agent.models import AgentRun  # noqa: E402
from agent.observers import forget, observe  # noqa: E402
from bench.loop import forget_bench, persisted  # noqa: E402
from core.events import Event  # noqa: E402
from metrics.multiprocess import count_in  # noqa: E402

FLOOR = 0.05


class TimedObserver:
    """metrics.heard, with the time spent in it added up."""

    def __init__(self) -> None:
        from metrics.heard import heard  # its series open their files in the bench's directory

        self.heard = heard
        self.seconds = 0.0

    def __call__(self, run: AgentRun, events: Sequence[Event]) -> None:
        started = time.perf_counter()
        self.heard(run, events)
        self.seconds += time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=30)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loop-metrics-bench-") as directory:
        count_in(Path(directory))
        observer = TimedObserver()
        try:
            off, on, counting = rounds(observer, options.steps, options.repeats)
        finally:
            forget(observer)
            forget_bench()
    share = counting / off
    verdict = "met" if share <= FLOOR else "MISSED"
    print(f"a persisted step ({options.steps} steps a run, {options.repeats} rounds, medians)")
    print(f"metrics off      {off * 1e6:>9.1f} µs")
    print(f"metrics on       {on * 1e6:>9.1f} µs   ({on / off:.3f}x off: noise and counting)")
    print(
        f"counting itself  {counting * 1e6:>9.1f} µs   {share:.2%} of a step off, <= 5%: {verdict}"
    )


def rounds(observer: TimedObserver, steps: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds a step off and on, and the observer's own seconds a step."""
    observe(observer)
    persisted(steps)  # warm up: imports, caches, connections, the series' files
    timed: dict[bool, list[float]] = {False: [], True: []}
    counting: list[float] = []
    for number in range(repeats):
        for on in (False, True) if number % 2 == 0 else (True, False):
            (observe if on else forget)(observer)
            observer.seconds = 0.0
            timed[on].append(persisted(steps))
            if on:
                counting.append(observer.seconds / steps)
    return (
        statistics.median(timed[False]),
        statistics.median(timed[True]),
        statistics.median(counting),
    )


if __name__ == "__main__":
    main()
