"""The files a shared link carries, when its sharer ticks them: those the conversation's shown runs
wrote (their successful write_file calls), copied from the sharer's workspace at share time
through the Files panel's own confined reader (workspace/browse.py: no symlink, no `..`, no
hard link to a file outside), within LOOP_SHARE_FILES_MAX_BYTES in all."""

import json
from dataclasses import dataclass, field

from django.conf import settings

from agent.models import AgentRun, ToolExecution
from core.results import ToolStatus
from tools.files import WRITE_FILE
from workspace.browse import BrowseError, file_components, open_download
from workspace.directory import workspace_path


class FilesTooLarge(Exception):
    """The files would take more than LOOP_SHARE_FILES_MAX_BYTES: the message says what to do."""


@dataclass
class Copied:
    """The files copied (path, bytes) and the paths written that are no longer there to copy."""

    files: list[tuple[str, bytes]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(content) for _, content in self.files)


def written_paths(runs: list[AgentRun]) -> list[str]:
    """The paths the runs wrote, in their workspace's own spelling, each once, in the order first
    written; a path the file tools would refuse is left out (it was never written)."""
    calls = ToolExecution.objects.filter(
        run__in=runs, tool=WRITE_FILE.name, status=ToolStatus.OK
    ).order_by("run_id", "step", "id")
    paths: dict[str, None] = {}
    for arguments in calls.values_list("arguments", flat=True):
        try:
            path = json.loads(arguments).get("path")
            paths["/".join(file_components(path))] = None
        except (ValueError, AttributeError, TypeError, BrowseError):
            continue
    return list(paths)


def copy_written(sharer_id: int, runs: list[AgentRun]) -> Copied:
    """The runs' files as the sharer's workspace holds them now; FilesTooLarge past the bound."""
    bound = settings.LOOP_SHARE_FILES_MAX_BYTES
    copied = Copied()
    for path in written_paths(runs):
        try:
            download = open_download(workspace_path(sharer_id), path)
        except BrowseError:  # deleted since, or made a folder: nothing to copy
            copied.missing.append(path)
            continue
        with download.file:
            content = download.file.read(bound - copied.size + 1)
        if copied.size + len(content) > bound:
            raise FilesTooLarge(
                f"The files this conversation wrote take more than this site's limit of "
                f"{bound:,} bytes for a shared link ({path} is where it went over). Share it "
                "without its files, or ask this site's operators to raise "
                "LOOP_SHARE_FILES_MAX_BYTES."
            )
        copied.files.append((path, content))
    return copied
