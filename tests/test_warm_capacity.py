"""Sandboxes started ahead are bounded, and a full pool starts no more: in a burst of many
people's runs, evicting one to start another only spent CPU on sandboxes nobody used."""

import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from sandbox import pool as sandbox_module
from sandbox.policies import Limits
from sandbox.pool import MachineLoad, WarmSandboxes

pytestmark = pytest.mark.fast


class FakeSandbox:
    def __init__(self) -> None:
        self.discarded = False

    def discard(self) -> None:
        self.discarded = True

    def alive(self) -> bool:
        return not self.discarded


def starting_into(started: list[FakeSandbox]) -> Callable[[Path, Limits], Future]:
    """A start that makes a fake sandbox at once, kept in `started`."""

    def start(workspace: Path, limits: Limits) -> Future:
        sandbox = FakeSandbox()
        started.append(sandbox)
        done: Future = Future()
        done.set_result(sandbox)
        return done

    return start


def test_a_full_pool_starts_no_sandbox_and_kills_none(settings):
    settings.LOOP_SANDBOX_WARM = True
    started: list[FakeSandbox] = []
    start = starting_into(started)

    pool = WarmSandboxes(idle_seconds=60, capacity=2)
    try:
        for name in ("a", "b", "c"):
            pool.prepare(Path(f"/workspaces/{name}"), Limits(), start)
        assert len(started) == 2
        assert not any(sandbox.discarded for sandbox in started)
        assert pool.take(Path("/workspaces/c"), Limits()) is None  # it goes cold
        assert pool.take(Path("/workspaces/a"), Limits()) is started[0]
        pool.prepare(Path("/workspaces/c"), Limits(), start)  # room again
        assert len(started) == 3
    finally:
        pool.drain()


def test_a_busy_machine_keeps_fewer_sandboxes_started_ahead(settings):
    """Starting ahead spends CPU for latency: while the CPUs are busy, at most busy_capacity."""
    settings.LOOP_SANDBOX_WARM = True
    started: list[FakeSandbox] = []
    busy = [1.0]
    start = starting_into(started)

    pool = WarmSandboxes(idle_seconds=60, capacity=16, busy_capacity=2, load=lambda: busy[0])
    try:
        for name in ("a", "b", "c", "d"):
            pool.prepare(Path(f"/workspaces/{name}"), Limits(), start)
        assert len(started) == 2  # busy: c and d go cold next time
        assert not any(sandbox.discarded for sandbox in started)
        busy[0] = 0.3
        for name in ("c", "d"):
            pool.prepare(Path(f"/workspaces/{name}"), Limits(), start)
        assert len(started) == 4  # quiet again: the whole capacity
    finally:
        pool.drain()


def test_the_machines_load_is_read_from_proc_stat():
    load = MachineLoad(window=0.0)
    assert load.busy_share() == 0.0  # one reading: nothing to compare yet
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:  # busy for a moment, so at least some ticks pass
        pass
    assert 0.0 <= load.busy_share() <= 1.0


def test_a_machine_without_proc_stat_counts_as_quiet(monkeypatch):
    """Starting ahead comes after a call's result: a load that cannot be read must not fail it."""

    def unreadable() -> tuple[int, int]:
        raise PermissionError("/proc/stat")

    monkeypatch.setattr(sandbox_module, "_cpu_ticks", unreadable)
    assert MachineLoad(window=0.0).busy_share() == 0.0
