"""What a snippet runs for (ForRun) and what it did (Execution), in the sandbox's words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sandbox.cgroups import Bound
from sandbox.policies import MIB


@dataclass(frozen=True)
class MemoryExceeded:
    """The kernel's OOM killer killed processes of a snippet: its own bound, or its person's
    (their snippets running at once together) was reached."""

    bound: Bound
    limit_bytes: int

    def describe(self) -> str:
        """What the model reads: what was killed, and why."""
        mib = self.limit_bytes // MIB
        if self.bound == "snippet":
            return (
                f"killed: the program's processes together used more than {mib} MiB of memory "
                "(what it keeps in /tmp and writes counts too)."
            )
        return (
            f"killed: your programs running at once together used more than {mib} MiB of "
            "memory; this one was killed. Run fewer at once, or use less memory."
        )


@dataclass(frozen=True)
class Execution:
    """What a snippet did: exit status (None when killed at the deadline or because its run was
    stopped), capped output."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    policy: str
    stopped: bool = False  # killed by kill_run: the run it ran for was stopped
    # Whether what it wrote was saved (sandbox/fence.py), and what its result says about that.
    files_saved: bool = True
    files_note: str = ""
    memory_exceeded: MemoryExceeded | None = None  # processes of it killed by the OOM killer


@dataclass(frozen=True)
class ForRun:
    """The run a snippet runs for, so that stopping the run kills it (SandboxHost.kill_run).

    `stopped` says whether the run has been stopped already: a snippet that starts after kill_run
    looked (it had not reached its sandbox yet) is killed as soon as it is registered, so no
    snippet of a stopped run outlives the stop. It must turn true before kill_run is called.
    """

    run_id: int
    stopped: Callable[[], bool] | None = None
    attempt: int = 0  # the run's claim: a saver whose run was claimed again saves nothing
