"""The chain of steps a sandbox is started by, before the snippet's interpreter: into its
person's cgroup, setpriv to the workspace's sandbox uid, the quota's overlay (which also sets the
process budget, enters the snippet's cgroup and sets its limits), then bwrap; or, without
isolation, prlimit in place of the overlay."""

import os
from pathlib import Path

from django.conf import settings

from sandbox import overlay
from sandbox.cgroups import CgroupError, MemoryCgroups, SnippetCgroup
from sandbox.errors import SandboxUnavailable
from sandbox.fence import fence_directory
from sandbox.overlay import REFUSED
from sandbox.policies import Limits, limits_text, process_budget, snippet_rlimits
from sandbox.programs import require_program
from sandbox.snippet import Execution
from workspace.directory import UID_CEILING, Identity
from workspace.quota import Quota


def workspace_owner(workspace: Path) -> Identity | None:
    """Whom snippets in this workspace run as: its owner, which ensure_workspace made the user's
    sandbox identity (the file tools give what they write the same owner). None when not root."""
    if os.geteuid() != 0:
        return None
    info = os.stat(workspace)
    if not 0 < settings.LOOP_SANDBOX_UID_BASE <= info.st_uid < UID_CEILING:
        raise SandboxUnavailable(
            f"run_code refuses to run: the workspace belongs to uid {info.st_uid}, not to a "
            f"sandbox uid (LOOP_SANDBOX_UID_BASE={settings.LOOP_SANDBOX_UID_BASE} and up). "
            "workspace.directory.ensure_workspace hands a workspace over to its user's sandbox uid."
        )
    return Identity(info.st_uid, info.st_gid)


def identity_prefix(workspace: Path) -> list[str]:
    """setpriv: no new privileges ever; as root, also become the workspace's sandbox uid and drop
    every capability and supplementary group."""
    prefix = [require_program("setpriv", "util-linux"), "--no-new-privs"]
    owner = workspace_owner(workspace)
    if owner is not None:
        prefix += [
            f"--reuid={owner.uid}",
            f"--regid={owner.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    return [*prefix, "--"]


def quota_prefix(
    workspace: Path,
    saver: int,
    *,
    limits: Limits | None = None,
    memory: SnippetCgroup | None = None,
) -> list[str]:
    """The command that bounds a sandboxed snippet's writes by the quota; the sandbox follows.

    It runs as the snippet's unprivileged identity (after setpriv). `saver` is the descriptor of
    the saver's end of its channel to the worker (sandbox.fence), and the saver reads the
    workspace runs' fences where sandbox.fence writes them. With `limits`, it also sets the
    process budget first (see policies.process_budget_prefix), and, after forking the saver,
    enters the program cgroup (`memory`) and sets the snippet's rlimits (see
    policies.limits_prefix), so the saver it leaves behind is bound by neither the snippet's
    memory, file-size nor descriptor limit: what `prlimit`, a shell step and another `prlimit`
    did, for none of their start-ups.
    """
    quota = Quota.from_settings()
    steps: list[str] = []
    if limits is not None:
        steps += ["--budget", limits_text(process_budget(limits))]
        if memory is not None:
            steps += ["--cgroup", str(memory.program_entry)]
        steps += ["--limits", limits_text(snippet_rlimits(limits))]
    return [
        settings.LOOP_SANDBOX_PYTHON,
        "-I",
        "-S",
        overlay.__file__,
        str(workspace),
        str(quota.max_bytes),
        str(quota.max_files),
        str(fence_directory(workspace)),
        str(saver),
        *steps,
        "--",
    ]


def memory_cgroup(workspace: Path, limits: Limits, cgroups: MemoryCgroups) -> SnippetCgroup | None:
    """The cgroups that bound this sandbox's memory, and its person's (sandbox.cgroups); None
    where the machine gives none: then RLIMIT_AS bounds each process, and nothing more."""
    owner = workspace_owner(workspace)
    person = str(owner.uid) if owner is not None else f"w{os.stat(workspace).st_ino}"
    try:
        return cgroups.snippet(person, None if owner is None else owner.uid, limits.memory_bytes)
    except CgroupError as error:
        raise SandboxUnavailable(f"run_code cannot run: {error}") from error


def memory_prefixes(memory: SnippetCgroup | None) -> tuple[list[str], list[str]]:
    """The chain's steps into the launch cgroup (first) and into the program's (before the
    sandbox proper), so each process is bounded before it could allocate."""
    if memory is None:
        return [], []
    return memory.launch_prefix(), memory.program_prefix()


def raise_if_memory_refused(execution: Execution) -> None:
    """The step into the snippet's cgroup failed, so nothing of the snippet ran: fail closed."""
    if execution.exit_status == 1 and execution.stderr.strip() == REFUSED:
        raise SandboxUnavailable(f"run_code cannot run: {REFUSED.removeprefix('bwrap: ')}.")
