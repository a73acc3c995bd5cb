"""The one thread of a sandbox host that forks sandboxes, and the fork itself."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from sandbox.cgroups import SnippetCgroup
from sandbox.fence import Channel
from sandbox.output import CappedReader
from sandbox.policies import Limits
from sandbox.process import Launched
from sandbox.programs import environment_for_host_process
from sandbox.reaper import Reaper, name_this_thread_a_launcher

PIPE_CAPACITY = 65536  # Linux's default; bwrap's options take a few hundred bytes


@dataclass(frozen=True)
class LaunchRequest:
    argv: list[str]
    limits: Limits
    cwd: Path | None
    memory: SnippetCgroup | None
    options_fd: int | None  # bwrap's options, to pass to it and close here once started
    saver: Channel | None  # to the saver of its writes: sandbox/overlay.py
    future: Future[Launched]


class Launcher:
    """The one thread of this process that forks sandboxes.

    bwrap --die-with-parent arms PR_SET_PDEATHSIG, whose "parent" is the thread that forked, not
    the process: a sandbox forked by a short-lived thread (a tool call's, or one started only to
    warm a sandbox) is killed as soon as that thread ends. Forked from this thread, which lives as
    long as its host (the worker's lives as long as the worker), every sandbox dies with the
    worker, a SIGKILLed one included, and never before.
    """

    def __init__(self, reaper: Reaper) -> None:
        self.reaper = reaper
        self.lock = threading.Lock()
        self.requests: queue.SimpleQueue[LaunchRequest | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    def start(
        self,
        argv: list[str],
        limits: Limits,
        cwd: Path | None = None,
        *,
        memory: SnippetCgroup | None = None,
        options_fd: int | None = None,
        saver: Channel | None = None,
    ) -> Future[Launched]:
        """Have argv started; the future holds it within a fork and exec (a millisecond or two).
        The sandbox's cgroups (memory) are released with it, or here if it cannot start."""
        future: Future[Launched] = Future()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._serve, name="sandbox-launcher", daemon=True
                )
                self.thread.start()
            self.requests.put(LaunchRequest(argv, limits, cwd, memory, options_fd, saver, future))
        return future

    def close(self) -> None:
        """End the thread once it has started what was asked before; the sandboxes it forked
        die with it (--die-with-parent): close it once they have ended."""
        with self.lock:
            thread, self.thread = self.thread, None
            if thread is not None:
                self.requests.put(None)
        if thread is not None:
            thread.join()

    def forget(self) -> None:
        """In a forked child: the parent's launcher thread does not exist here."""
        self.lock = threading.Lock()
        self.requests = queue.SimpleQueue()
        self.thread = None

    def _serve(self) -> None:
        name_this_thread_a_launcher()  # its children are no host's orphans
        if os.geteuid() == 0:
            self.reaper.adopt_orphans()
        while (request := self.requests.get()) is not None:
            try:
                # No sandbox may be mistaken for an orphan before it is tracked.
                with self.reaper.lock:
                    sandbox = launch(request, self.reaper)
                    self.reaper.started.add(sandbox.process.pid)
                request.future.set_result(sandbox)
            except BaseException as error:  # the caller's failure, never this thread's end
                if request.memory is not None:
                    request.memory.release()
                if request.saver is not None:
                    request.saver.close()
                request.future.set_exception(error)


def launch(request: LaunchRequest, reaper: Reaper) -> Launched:
    options = () if request.options_fd is None else (request.options_fd,)
    saver = () if request.saver is None else (request.saver.saver_end(),)
    try:
        process = subprocess.Popen(  # noqa: S603 (argv is built above, never by a shell)
            request.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=request.cwd,
            env=environment_for_host_process(),
            start_new_session=True,
            pass_fds=options + saver,
        )
    finally:
        for fd in options:
            os.close(fd)
        if request.saver is not None:
            request.saver.handed_over()
    return Launched(
        process,
        CappedReader(process.stdout, request.limits.output_bytes),
        CappedReader(process.stderr, request.limits.output_bytes),
        request.memory,
        request.saver,
        reaper,
    )


def options_pipe(options: list[str]) -> int:
    """A pipe holding bwrap's options, NUL-terminated, for `bwrap --args FD`; its read end."""
    data = b"".join(option.encode() + b"\0" for option in options)
    if len(data) > PIPE_CAPACITY:  # a write past it would wait for a reader for ever
        raise ValueError("bwrap's options do not fit in a pipe")
    reader, writer = os.pipe()
    try:
        os.write(writer, data)
    finally:
        os.close(writer)
    return reader
