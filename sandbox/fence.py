"""What fences a snippet's saved files like its run's events, and what a saver tells its call.

A run's database writes carry the attempt its worker claimed it at; a worker that lost the run
(frozen past LOOP_STALE_SECONDS, then woken) is refused. A snippet's files are saved by its
saver (sandbox/overlay.py) when its sandbox ends, whenever that is, so they are fenced too: each
claim of a run raises the run's fence, a root-owned file beside the workspaces
(`.fences/<user>/<run>`, holding the attempt) that no sandbox can reach or write, under the
workspace's lock; a saver compares the attempt it ran for under that same lock, and one whose run
was claimed again since saves nothing.

The worker and a sandbox's saver talk over a socket pair (a `Channel`): when a sandbox is given
its program (a warm one idles before that), the worker says which run and attempt it runs for,
and the moment it started, which the saver needs to tell the files another call changed
meanwhile from its own; when it has saved, the saver says how that went, whatever the snippet
printed.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import suppress
from pathlib import Path

from sandbox.overlay import FAILED, SAVED
from sandbox.overlay_save import Ticket

FENCES = ".fences"
# The clock the kernel stamps a file's change time (ctime) with.
_COARSE_CLOCK = 5  # CLOCK_REALTIME_COARSE (Linux); the time module does not name it
_REPLY_CAP = 256 * 1024
NO_REPLY = (
    "Not saved, perhaps: the sandbox's saver ended without saying whether this program's files "
    "were saved. Check them with list_files or read_file."
)


def fence_directory(workspace: Path) -> Path:
    """Where the fences of a workspace's runs are: beside the workspaces, never inside one."""
    return workspace.parent / FENCES / workspace.name


def raise_fence(workspace: Path, run_id: int, attempt: int) -> None:
    """Record that `run_id` is worked at `attempt` from now on: savers of its earlier attempts
    save nothing. Written under the workspace's lock, so a save under way ends first; called as
    the run is claimed, before the claim commits (a fence ahead of a claim that failed to commit
    only refuses the saves of a worker whose run was being taken from it)."""
    try:
        lock = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:  # no workspace, so no sandbox of any attempt has been started in it
        return
    try:
        directory = fence_directory(workspace)
        for level in (directory.parent, directory):
            level.mkdir(mode=0o711, exist_ok=True)
            level.chmod(0o711)  # traversable by the saver, which knows its run; listable by none
        fcntl.flock(lock, fcntl.LOCK_EX)
        temporary = directory / f".{run_id}.{os.urandom(8).hex()}"
        temporary.write_text(str(attempt))
        temporary.chmod(0o644)
        temporary.replace(directory / str(run_id))
    finally:
        os.close(lock)  # which releases the lock


def started_moment() -> int:
    """Now, as a change time a file changed from now on will have at least (nanoseconds).

    File change times come from the coarse clock, one tick (a few milliseconds) at a time, whose
    ticks trail the real time (one is counted late, and not at all on an idle CPU); multigrain
    timestamps (Linux 6.13 on) stamp a change finer, up to the real time it was made, so past the
    coarse clock. Waiting for the coarse clock to pass the real time now makes the moment later
    than every change already made, and no later than any change to come, which is stamped at
    least with the coarse clock's time."""
    now = time.clock_gettime_ns(time.CLOCK_REALTIME)
    tick = time.clock_getres(_COARSE_CLOCK)
    while (moment := time.clock_gettime_ns(_COARSE_CLOCK)) <= now:
        time.sleep(tick / 4)
    return moment


class Channel:
    """The worker's end of the socket pair to one sandbox's saver."""

    def __init__(self) -> None:
        self.ours, self.savers = socket.socketpair()

    def saver_end(self) -> int:
        """The descriptor the sandbox's command line names and its process must inherit."""
        return self.savers.fileno()

    def handed_over(self) -> None:
        """The sandbox started (or could not): its copy of the saver's end is its own."""
        self.savers.close()

    def give(self, run_id: int | None, attempt: int) -> None:
        """Before the sandbox gets its program: what it runs for, and from when."""
        with suppress(OSError):  # a saver already gone says nothing back: the call says so
            self.ours.sendall(Ticket(run_id or 0, attempt, started_moment()).text())

    def outcome(self) -> tuple[bool, str]:
        """Whether the files were saved, and what the call's result should say about them; asked
        once the saver has ended (the sandbox's output is complete only then)."""
        self.ours.setblocking(False)
        reply = b""
        with suppress(BlockingIOError, ConnectionError):
            while len(reply) < _REPLY_CAP and (chunk := self.ours.recv(_REPLY_CAP)):
                reply += chunk
        self.close()
        status, _, note = reply.decode(errors="replace").partition("\n")
        if status not in (SAVED, FAILED):
            return False, NO_REPLY
        return status == SAVED, note.strip()

    def close(self) -> None:
        self.ours.close()
        self.savers.close()
