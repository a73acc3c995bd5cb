"""Reaping what outlives its sandbox: bwrap's namespace init, and the quota's saver."""

import ctypes
import logging
import os
import select
import threading
import time
from contextlib import suppress
from pathlib import Path

from django.conf import settings

from workspace.directory import UID_CEILING

logger = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_SET_NAME = 15
# The kernel's name of every launcher thread (Launcher), whichever host's: its children are
# sandboxes a launcher started, never orphans.
LAUNCHER_THREAD = b"sandbox-launch"
# How long closing waits for the orphans still to reap: each ends moments after its sandbox.
CLOSE_SECONDS = 5.0


class Reaper:
    """Reaps the sandbox processes whose parent ends before them.

    bwrap's namespace init outlives bwrap by a moment, and the workspace quota's saver outlives
    the sandbox by design. Their new parent would be PID 1, which in a container may reap them
    late or never, and a zombie still counts against its user's process limit. As root, the
    launcher makes this process a child subreaper, so they come to it instead; after each
    sandbox ends, the children of a sandbox uid that it did not start itself are each waited for
    on a pidfd by the reaper thread. Every launcher thread, whichever host's in this process,
    bears the kernel name LAUNCHER_THREAD: the children it forked are never taken for orphans.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: set[int] = set()  # sandboxes this process started and has not reaped yet
        self.waiting: dict[int, int] = {}  # pidfd: the pid of an orphan to reap when it ends
        self.wake_reader, self.wake_writer = os.pipe()
        self.thread: threading.Thread | None = None
        self.closing = False
        self.deadline = 0.0  # once closing: when the thread stops waiting for orphans

    def adopt_orphans(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
        self.thread = threading.Thread(target=self._serve, name="sandbox-reaper", daemon=True)
        self.thread.start()

    def reaped(self, pid: int) -> None:
        """A sandbox this process started has been reaped: what it left is now ours to reap."""
        with self.lock:
            self.started.discard(pid)
            if self.thread is None or self.closing:
                return
            waited = set(self.waiting.values())
            for orphan in _adopted() - self.started - waited:
                # Nobody else reaps it, so its pid cannot have been reused before the pidfd.
                if _runs_as_a_sandbox_uid(orphan):
                    with suppress(ProcessLookupError):
                        self.waiting[os.pidfd_open(orphan)] = orphan
            os.write(self.wake_writer, b"\0")

    def close(self) -> None:
        """Reap the orphans it waits for (for CLOSE_SECONDS at most), then stop the reaper
        thread and close its descriptors."""
        with self.lock:
            if self.closing:
                return
            self.closing = True
            self.deadline = time.monotonic() + CLOSE_SECONDS
            thread = self.thread
            os.write(self.wake_writer, b"\0")
        if thread is not None:
            thread.join()
        with self.lock:
            for pidfd in [*self.waiting, self.wake_reader, self.wake_writer]:
                os.close(pidfd)
            self.waiting.clear()

    def forget(self) -> None:
        """In a forked child: it is no subreaper, and nothing here is its to reap."""
        if not self.closing:
            os.close(self.wake_reader)
            os.close(self.wake_writer)
        Reaper.__init__(self)

    def _serve(self) -> None:
        while True:
            poller = select.poll()  # not select(): a busy worker's descriptors pass 1024
            with self.lock:
                left = self.deadline - time.monotonic()
                if self.closing and (not self.waiting or left <= 0):
                    return
                for pidfd in [self.wake_reader, *self.waiting]:
                    poller.register(pidfd, select.POLLIN)
            for pidfd, _ in poller.poll(left * 1000 if self.closing else None):
                if pidfd == self.wake_reader:
                    os.read(pidfd, 4096)
                    continue
                with self.lock:
                    orphan = self.waiting.pop(pidfd)
                with suppress(ChildProcessError):
                    os.waitpid(orphan, 0)
                os.close(pidfd)


def name_this_thread_a_launcher() -> None:
    """Give the calling thread the kernel name LAUNCHER_THREAD (see _adopted)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NAME, LAUNCHER_THREAD, 0, 0, 0) != 0:  # never seen: logged, not raised
        logger.warning("The sandbox launcher thread could not be named: %s", ctypes.get_errno())


def _adopted() -> set[int]:
    """This process's children, whichever of its threads each is attached to, but a launcher
    thread's (a child stays attached to the thread that forked it while that thread lives)."""
    children: set[int] = set()
    for thread in os.listdir("/proc/self/task"):
        with suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            task = Path(f"/proc/self/task/{thread}")
            if (task / "comm").read_bytes().rstrip(b"\n") == LAUNCHER_THREAD:
                continue
            children.update(map(int, (task / "children").read_text().split()))
    return children


def _runs_as_a_sandbox_uid(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # it ended and was reaped meanwhile
        return False
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    base: int = settings.LOOP_SANDBOX_UID_BASE
    return base <= uid < UID_CEILING
