"""The sandboxes of one process, held by one object its owner (the worker, an in-process runner,
a command) makes, hands to the tools that run snippets, and closes when it stops."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.cgroups import MemoryCgroups
from sandbox.launcher import Launcher
from sandbox.policies import Limits
from sandbox.pool import WarmSandboxes
from sandbox.process import RunningSnippets
from sandbox.reaper import Reaper
from sandbox.snippet import Execution, ForRun
from sandbox.unisolated import SubprocessSandbox

POLICIES = ("bubblewrap", "subprocess")


class Sandbox(Protocol):
    policy: str

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution: ...


class SandboxHost:
    """What runs this process's snippets: the launcher thread that forks every sandbox, the
    reaper of what outlives one, the sandboxes started ahead, the snippets running by run (so a
    stopped run's are killed at once) and the memory cgroups.

    A process may hold several (a run worked in-process without one gets its own): a launcher's
    children are no reaper's orphans. Closing it drains the sandboxes started ahead, ends the
    launcher (the sandboxes it forked die with it) and the reaper, and removes the cgroups left
    behind.
    """

    def __init__(self, pool: WarmSandboxes | None = None) -> None:
        self.cgroups = MemoryCgroups()
        self.reaper = Reaper()
        self.launcher = Launcher(self.reaper)
        self.pool = pool or WarmSandboxes()
        self.running = RunningSnippets()
        forget = weakref.WeakMethod(self.forget)
        os.register_at_fork(after_in_child=lambda: _call_if_alive(forget))

    def sandbox(self, policy: str | None = None) -> Sandbox:
        """The sandbox of `policy` (LOOP_SANDBOX unless given)."""
        chosen = policy or settings.LOOP_SANDBOX
        if chosen == "bubblewrap":
            return BubblewrapSandbox(self.launcher, self.pool, self.cgroups, self.running)
        if chosen == "subprocess":
            return SubprocessSandbox(self.launcher, self.cgroups, self.running)
        raise ImproperlyConfigured(
            f"LOOP_SANDBOX must be one of {', '.join(POLICIES)}, not {chosen!r}."
        )

    def kill_run(self, run_id: int) -> int:
        """Kill every sandbox running a snippet for this run now, from any thread; how many it
        killed.

        Each such snippet ends as a stopped Execution (run_code's result says the run was
        stopped), and what it wrote before it was killed is saved, as at a timeout. A snippet
        that had just ended on its own keeps its result and is not counted.
        """
        return self.running.kill(run_id)

    def close(self) -> None:
        self.pool.drain()
        self.launcher.close()
        self.reaper.close()
        self.cgroups.left_behind.retry()

    def forget(self) -> None:
        """In a forked child: nothing of the parent's sandboxes is this process's."""
        for part in (self.launcher, self.reaper, self.pool, self.running, self.cgroups):
            part.forget()

    def __enter__(self) -> SandboxHost:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _call_if_alive(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    """A fork's hook outlives its host: a host gone since forgets nothing."""
    bound = method()
    if bound is not None:
        bound()
