"""Start-up checks: does the configured sandbox actually run a snippet on this machine, and is
its memory bounded per snippet and per person?"""

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register

from sandbox.cgroups import MemoryCgroups, Unavailable
from sandbox.errors import SandboxUnavailable
from sandbox.host import SandboxHost
from sandbox.policies import Limits
from sandbox.unisolated import SubprocessSandbox
from workspace.directory import ensure_workspace

PROBE = "print(6 * 7)"
PROBE_USER_ID = 0  # no account has id 0: the probe's snippet counts against no user's budget


@dataclass(frozen=True)
class SandboxReport:
    works: bool
    policy: str
    detail: str


def probe_sandbox() -> SandboxReport:
    """Run a tiny snippet in a throwaway workspace, exactly as run_code would, in sandboxes of
    its own (closed after it)."""
    with SandboxHost() as host:
        return probe(host)


def probe(host: SandboxHost) -> SandboxReport:
    sandbox = host.sandbox()
    with tempfile.TemporaryDirectory(prefix="loop-sandbox-probe-") as directory:
        workspace = ensure_workspace(Path(directory) / "workspace", PROBE_USER_ID)
        try:
            # A throwaway workspace gets no sandbox started ahead for a next call.
            execution = sandbox.run(PROBE, workspace, Limits(timeout=20), start_next=False)
        except SandboxUnavailable as error:
            return SandboxReport(False, sandbox.policy, error.detail)
    if execution.exit_status == 0 and execution.stdout.strip() == "42":
        return SandboxReport(True, sandbox.policy, "ran a snippet and read its output")
    detail = f"exit status {execution.exit_status}, stderr: {execution.stderr.strip()[:500]}"
    return SandboxReport(False, sandbox.policy, detail)


@register("sandbox")
def check_sandbox(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    report = probe_sandbox()
    if not report.works:
        return [
            Warning(
                f"run_code's sandbox ({report.policy}) does not work: {report.detail}",
                hint="Run `manage.py sandboxcheck` for details; run_code refuses until fixed.",
                id="tools.W001",
            )
        ]
    if settings.LOOP_SANDBOX == "subprocess":
        return [
            Warning(
                f"LOOP_SANDBOX=subprocess: run_code runs snippets with {SubprocessSandbox.policy}.",
                hint="Install bubblewrap and unset LOOP_SANDBOX to isolate snippets.",
                id="tools.W002",
            )
        ]
    return []


@register("sandbox")
def check_memory_bound(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    state = MemoryCgroups().state()
    if not isinstance(state, Unavailable):
        return []
    return [
        Warning(
            "run_code cannot bound the memory of a snippet's processes together, nor of a "
            f"person's snippets together: {state.reason}. Each process gets "
            f"LOOP_SANDBOX_MEMORY_MB ({settings.LOOP_SANDBOX_MEMORY_MB} MiB) only, so one "
            "snippet that forks can use that many times over.",
            hint="Run the worker as root on a machine with the cgroup memory controller, or "
            "point LOOP_SANDBOX_CGROUP at a cgroup delegated to it (docs/tools.md).",
            id="tools.W003",
        )
    ]
