"""What a snippet may do: its limits (time, CPU, memory, processes, files, output), as rlimits set
hard and soft alike so the snippet cannot raise them, and as the prlimit options that set them."""

from __future__ import annotations

import resource
from dataclasses import dataclass

from django.conf import settings

from sandbox.programs import require_program

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    timeout: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MIB
    max_processes: int = 64
    max_file_bytes: int = 16 * MIB
    max_open_files: int = 64
    tmp_bytes: int = 16 * MIB
    output_bytes: int = 64 * 1024

    @classmethod
    def from_settings(cls, timeout: float) -> Limits:
        return cls(
            timeout=timeout,
            # One second over the wall clock, so a busy loop ends as a timeout, not a CPU kill.
            cpu_seconds=int(timeout) + 1,
            memory_bytes=settings.LOOP_SANDBOX_MEMORY_MB * MIB,
            max_processes=settings.LOOP_SANDBOX_MAX_PROCESSES,
        )


def process_budget(limits: Limits) -> dict[int, int]:
    """The uid's process limit, set before anything in the chain makes a user namespace.

    The kernel counts a uid's processes in every user namespace up to the host, and checks each
    level against the limit its creator had: a namespace made under the worker's own limit would
    count against that, not this one. Set first, it bounds all the uid's sandboxes together.
    """
    return {resource.RLIMIT_NPROC: limits.max_processes}


def snippet_rlimits(limits: Limits) -> dict[int, int]:
    """The per-process limits. RLIMIT_AS stays as a backstop under the cgroup's bound (one
    process cannot use more than all of them together), and is the only bound without one."""
    return {
        resource.RLIMIT_CPU: limits.cpu_seconds,
        resource.RLIMIT_AS: limits.memory_bytes,
        resource.RLIMIT_FSIZE: limits.max_file_bytes,
        resource.RLIMIT_NOFILE: limits.max_open_files,
        resource.RLIMIT_CORE: 0,
    }


def limits_text(rlimits: dict[int, int]) -> str:
    """sandbox/overlay.py's LIMITS: RESOURCE=VALUE pairs, each set hard and soft."""
    return ",".join(f"{number}={value}" for number, value in rlimits.items())


PRLIMIT_OPTIONS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_CORE: "--core",
}


def process_budget_prefix(limits: Limits) -> list[str]:
    """prlimit --nproc (process_budget), for the chain without the quota's overlay."""
    processes = limits.max_processes
    return [require_program("prlimit", "util-linux"), f"--nproc={processes}:{processes}", "--"]


def limits_prefix(limits: Limits) -> list[str]:
    """prlimit with the snippet's limits (snippet_rlimits), hard and soft alike, for the chain
    without the quota's overlay."""
    options = [
        f"{PRLIMIT_OPTIONS[number]}={value}:{value}"
        for number, value in snippet_rlimits(limits).items()
    ]
    return [require_program("prlimit", "util-linux"), *options, "--"]
