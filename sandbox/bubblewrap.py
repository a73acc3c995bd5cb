"""The bubblewrap sandbox: namespaces, no network, a read-only /usr, the workspace the only
writable directory (its writes bounded by the quota's overlay), a sandbox started ahead for the
next call; and what bwrap's own failures say."""

from __future__ import annotations

import errno
import os
from concurrent.futures import Future
from pathlib import Path

from sandbox.cgroups import MemoryCgroups
from sandbox.chain import (
    identity_prefix,
    memory_cgroup,
    memory_prefixes,
    quota_prefix,
    raise_if_memory_refused,
)
from sandbox.errors import ProcessLimitReached, SandboxUnavailable
from sandbox.fence import Channel
from sandbox.interpreter import interpreter_arguments
from sandbox.launcher import Launcher, options_pipe
from sandbox.policies import Limits
from sandbox.pool import WarmSandboxes
from sandbox.process import Launched, RunningSnippets
from sandbox.programs import require_program
from sandbox.snippet import Execution, ForRun

WORKSPACE_MOUNT = "/workspace"


class BubblewrapSandbox:
    policy = "bubblewrap"

    def __init__(
        self,
        launcher: Launcher,
        pool: WarmSandboxes,
        cgroups: MemoryCgroups,
        running: RunningSnippets,
    ) -> None:
        self.launcher, self.pool, self.cgroups, self.running = launcher, pool, cgroups, running

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution:
        sandbox = self.pool.take(workspace, limits) or self.launch(workspace, limits).result()
        execution = sandbox.finish(code, limits, self.policy, run=run, running=self.running)
        raise_if_bwrap_failed(execution, limits)
        if start_next and not execution.stopped:  # a stopped run calls no more
            self.pool.prepare(workspace, limits, self.launch)
        return execution

    def launch(self, workspace: Path, limits: Limits) -> Future[Launched]:
        bwrap, *options, separator = self.bwrap_arguments(workspace, limits)
        saver = Channel()
        # bwrap reads its options from a pipe: in its argv they would show the snippet the
        # host's path of the workspace (/proc/1/cmdline, bwrap's init).
        options_fd = options_pipe(options)
        memory = None
        try:
            memory = memory_cgroup(workspace, limits, self.cgroups)
            # Bounds what the snippet writes, and fences it (sandbox/overlay.py), between the
            # process budget and the snippet's cgroup and limits, which it sets itself.
            quota = quota_prefix(workspace, saver.saver_end(), limits=limits, memory=memory)
        except BaseException:
            os.close(options_fd)
            saver.close()
            if memory is not None:
                memory.release()
            raise
        into_launch, _ = memory_prefixes(memory)
        argv = [
            *into_launch,
            *identity_prefix(workspace),
            *quota,
            *[bwrap, "--args", str(options_fd), separator],
            *interpreter_arguments(),
        ]
        return self.launcher.start(argv, limits, memory=memory, options_fd=options_fd, saver=saver)

    def bwrap_arguments(self, workspace: Path, limits: Limits) -> list[str]:
        return [
            require_program("bwrap", "bubblewrap"),
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            # No --new-session: the launcher already gives the sandbox a session of its own with
            # no terminal (nothing to inject input into), and bwrap's setsid would take its
            # namespace init out of the process group that Launched.kill signals.
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--clearenv",
            *environment(),
            "--ro-bind",
            "/usr",
            "/usr",
            *merged_usr_links(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/tmp",  # noqa: S108 (a fresh, size-capped tmpfs inside the sandbox)
            "--bind",
            str(workspace),
            WORKSPACE_MOUNT,
            "--chdir",
            WORKSPACE_MOUNT,
            "--remount-ro",
            "/dev",
            "--remount-ro",
            "/",
            "--",
        ]


def environment() -> list[str]:
    variables = {
        "PATH": "/usr/bin:/bin",
        "HOME": WORKSPACE_MOUNT,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    return [part for name, value in variables.items() for part in ("--setenv", name, value)]


def merged_usr_links() -> list[str]:
    """Mirror the host's /bin, /lib, /lib64, /sbin: symlinks into /usr on merged-/usr systems."""
    arguments: list[str] = []
    for name in ("bin", "sbin", "lib", "lib64"):
        path = Path("/", name)
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    return arguments


def raise_if_bwrap_failed(execution: Execution, limits: Limits) -> None:
    """bwrap reports its own failures as `bwrap: ...` on stderr. A fork or clone refused with
    EAGAIN ("Creating new namespace failed: Resource temporarily unavailable") is the process
    limit of the snippets' uid, not the kernel's namespaces, and is reported as such."""
    if (
        execution.exit_status == 1
        and not execution.stdout
        and execution.stderr.startswith("bwrap:")
    ):
        reason = execution.stderr.strip().splitlines()[0]
        if reason.endswith(os.strerror(errno.EAGAIN)):
            raise ProcessLimitReached(process_limit_message(limits), policy=execution.policy)
        raise_if_memory_refused(execution)
        raise SandboxUnavailable(
            f"run_code cannot run: bubblewrap could not build the sandbox ({reason}). The kernel "
            "must allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0). An operator may opt into LOOP_SANDBOX=subprocess, "
            "which gives no isolation."
        )


def process_limit_message(limits: Limits) -> str:
    if os.geteuid() == 0:
        return (
            f"run_code refused: your snippets are at their process limit ({limits.max_processes} "
            "processes, counting your snippets still running, the processes they started and "
            "the sandboxes started ahead for you). Let a running snippet finish, or start fewer "
            "processes, then try again."
        )
    return (
        f"run_code refused: the snippets' process limit ({limits.max_processes}) is reached. "
        "This worker is not root, so every user's snippets run as its one uid and share that "
        "budget; try again when other snippets have finished."
    )
