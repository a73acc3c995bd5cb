"""Sandboxes started ahead: one per recently used workspace, idling on stdin for its next call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from django.conf import settings

from sandbox.policies import Limits
from sandbox.process import Launched


class Warm:
    """A sandbox started ahead for one workspace and limits, and the timer that retires it."""

    def __init__(
        self,
        key: tuple[Path, Limits],
        sandbox: Future[Launched],
        idle_seconds: float,
        expire: Callable[[Warm], None],
    ) -> None:
        self.key, self.sandbox = key, sandbox
        self.expiry = threading.Timer(idle_seconds, expire, args=(self,))
        self.expiry.daemon = True

    def discard(self) -> None:
        self.expiry.cancel()
        if self.sandbox.exception() is None:  # waits for a start under way: it is killed too
            self.sandbox.result().discard()


class MachineLoad:
    """How busy the machine's CPUs were over the last second or so, from /proc/stat: read at most
    once a `window`, by whichever call asks first after it; 0.0 until two readings exist."""

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self.lock = threading.Lock()
        self.reading: tuple[float, int, int] | None = None  # (monotonic time, busy, all) ticks
        self.share = 0.0

    def busy_share(self) -> float:
        now = time.monotonic()
        with self.lock:
            if self.reading is not None and now - self.reading[0] < self.window:
                return self.share
            try:
                busy, total = _cpu_ticks()
            except (OSError, ValueError):  # no /proc/stat to read: taken as quiet, as before
                return 0.0
            if self.reading is not None and total > self.reading[2]:
                self.share = (busy - self.reading[1]) / (total - self.reading[2])
            self.reading = (now, busy, total)
            return self.share


def _cpu_ticks() -> tuple[int, int]:
    """The machine's CPU time so far, in ticks: busy, and all (idle and waiting for I/O too)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = sum(ticks[3:5])  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


class WarmSandboxes:
    """One sandbox per recently used workspace, started ahead and idling on stdin.

    An agent calls run_code again and again in a run; starting the next sandbox while the model
    thinks takes the namespace and interpreter start-up off the call's latency. A warm sandbox
    serves only the workspace and limits it was built for, runs nothing until it gets a program,
    counts against its user's process budget while it idles, dies with the worker, and is killed
    after `idle_seconds` unused. At most `capacity` idle at once.

    Starting ahead trades CPU for latency, and is wasted whenever the run calls no other snippet
    (a sandbox start is 20 to 30 ms of CPU; a call served ahead saves about as much wall time).
    When the machine's CPUs were at least `BUSY_SHARE` busy over the last second, CPU is what
    the runs wait for: then at most `busy_capacity` idle at once, so a burst of many people's
    runs, each calling run_code once, spends almost nothing on sandboxes nobody uses.
    """

    BUSY_SHARE = 0.8

    def __init__(
        self,
        idle_seconds: float = 120.0,
        capacity: int = 16,
        *,
        busy_capacity: int = 2,
        load: Callable[[], float] | None = None,
    ) -> None:
        self.idle_seconds, self.capacity = idle_seconds, capacity
        self.busy_capacity = min(busy_capacity, capacity)
        self.load = load or MachineLoad().busy_share
        self.idle: dict[tuple[Path, Limits], Warm] = {}
        self.lock = threading.Lock()
        self.served = 0  # calls a sandbox started ahead has served: what tests and the bench read

    def take(self, workspace: Path, limits: Limits) -> Launched | None:
        with self.lock:
            warm = self.idle.pop((workspace, limits), None)
        if warm is None:
            return None
        warm.expiry.cancel()
        if warm.sandbox.exception() is not None:
            return None
        sandbox = warm.sandbox.result()
        if not sandbox.alive():
            sandbox.discard()
            return None
        with self.lock:
            self.served += 1
        return sandbox

    def prepare(
        self, workspace: Path, limits: Limits, start: Callable[[Path, Limits], Future[Launched]]
    ) -> None:
        if not settings.LOOP_SANDBOX_WARM:
            return
        key = (workspace, limits)
        with self.lock:
            if key in self.idle:
                # A parallel call's sandbox already waits: starting another only to kill one
                # would spend the user's process budget for nothing.
                return
            if len(self.idle) >= self.room():
                # Full: this one goes cold next time. Evicting an idle sandbox to start this
                # one would, in a burst of many people's runs, start sandboxes only to kill
                # them (each start is tens of ms of CPU: docs/engine.md, "Where a run's CPU
                # goes").
                return
            warm = Warm(key, start(workspace, limits), self.idle_seconds, self._expire)
            self.idle[key] = warm
        warm.expiry.start()

    def room(self) -> int:
        """How many may idle now: fewer while the machine's CPUs are busy."""
        return self.busy_capacity if self.load() >= self.BUSY_SHARE else self.capacity

    def _expire(self, warm: Warm) -> None:
        with self.lock:
            if self.idle.get(warm.key) is not warm:
                return  # taken in the meantime
            del self.idle[warm.key]
        warm.discard()

    def forget(self) -> None:
        """In a forked child: the parent's sandboxes are not this process's to use or kill."""
        self.lock = threading.Lock()
        self.idle = {}

    def drain(self) -> None:
        """Kill every idle sandbox, including those still starting (tests, shutdown)."""
        with self.lock:
            entries = list(self.idle.values())
            self.idle.clear()
        for warm in entries:
            warm.discard()
