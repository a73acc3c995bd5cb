"""The workspace quota: how much a workspace holds, and the check every writer into it makes.

A workspace may hold LOOP_WORKSPACE_MAX_BYTES bytes of files and LOOP_WORKSPACE_MAX_FILES files
and directories. write_file (and any later writer, such as uploads) measures and writes under the
workspace's lock with `admitted`; run_code's snippets are bounded by the kernel through
tools.overlay, whose saver takes the same lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from tools import overlay, overlay_save
from tools.base import ToolError
from tools.fence import fence_directory
from tools.overlay_save import Usage

__all__ = ["Budget", "Quota", "QuotaExceeded", "Usage", "admitted", "sandbox_prefix", "usage"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class Quota:
    max_bytes: int
    max_files: int

    @classmethod
    def from_settings(cls) -> Quota:
        return cls(settings.LOOP_WORKSPACE_MAX_BYTES, settings.LOOP_WORKSPACE_MAX_FILES)

    def describe(self, used: Usage) -> str:
        return overlay_save.describe(used, self.max_bytes, self.max_files)


class QuotaExceeded(ToolError):
    """A write refused because it would take the workspace past its quota."""


def usage(workspace: Path | int) -> Usage:
    """What the workspace holds now: a path, or a directory already open (never followed)."""
    if isinstance(workspace, int):
        return overlay_save.usage(workspace)
    handle = os.open(workspace, _DIRECTORY)
    try:
        return overlay_save.usage(handle)
    finally:
        os.close(handle)


@dataclass
class Budget:
    """The room one write has, measured under the workspace's lock."""

    quota: Quota
    used: Usage

    def admit(self, what: str, size: int, *, new_entries: int, replaced_bytes: int = 0) -> None:
        after = Usage(self.used.bytes - replaced_bytes + size, self.used.files + new_entries)
        if after.bytes > self.quota.max_bytes or after.files > self.quota.max_files:
            raise QuotaExceeded(
                f"Not written: {what} would take your workspace past its quota. "
                f"{self.quota.describe(self.used)} Delete files you no longer need "
                "(with run_code) and try again."
            )
        self.used = after


@contextmanager
def admitted(root: int) -> Iterator[Budget]:
    """Hold the workspace's lock (root is its open directory) and measure what it holds."""
    fcntl.flock(root, fcntl.LOCK_EX)
    try:
        yield Budget(Quota.from_settings(), overlay_save.usage(root))
    finally:
        fcntl.flock(root, fcntl.LOCK_UN)


def sandbox_prefix(workspace: Path, saver: int) -> list[str]:
    """The command that bounds a sandboxed snippet's writes by the quota; the sandbox follows.

    It runs as the snippet's unprivileged identity (after setpriv), before the rlimits, so the
    saver it leaves behind is bound by neither the snippet's file-size nor its descriptor limit.
    `saver` is the descriptor of the saver's end of its channel to the worker (tools.fence), and
    the saver reads the workspace runs' fences where tools.fence writes them.
    """
    quota = Quota.from_settings()
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
        "--",
    ]
