"""The workspace quota: how much a workspace holds, and the check every writer into it makes.

A workspace may hold LOOP_WORKSPACE_MAX_BYTES bytes of files and LOOP_WORKSPACE_MAX_FILES files
and directories. write_file (and any later writer, such as uploads) measures and writes under the
workspace's lock with `admitted`; run_code's snippets are bounded by the kernel through
sandbox.overlay, whose saver takes the same lock (sandbox.chain.quota_prefix starts it).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from workspace import paths
from workspace.paths import Usage

__all__ = ["Budget", "Quota", "QuotaExceeded", "Usage", "admitted", "usage"]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class Quota:
    max_bytes: int
    max_files: int

    @classmethod
    def from_settings(cls) -> Quota:
        return cls(settings.LOOP_WORKSPACE_MAX_BYTES, settings.LOOP_WORKSPACE_MAX_FILES)

    def describe(self, used: Usage) -> str:
        return paths.describe(used, self.max_bytes, self.max_files)


class QuotaExceeded(Exception):
    """A write refused because it would take the workspace past its quota, with the sentence
    that says so (write_file gives it to the model as its result)."""


def usage(workspace: Path | int) -> Usage:
    """What the workspace holds now: a path, or a directory already open (never followed)."""
    if isinstance(workspace, int):
        return paths.usage(workspace)
    handle = os.open(workspace, _DIRECTORY)
    try:
        return paths.usage(handle)
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
        yield Budget(Quota.from_settings(), paths.usage(root))
    finally:
        fcntl.flock(root, fcntl.LOCK_UN)
