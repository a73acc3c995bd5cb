"""A sandbox process: started and waiting for its program on stdin, then given it, waited for
until it ends or its deadline, killed (at the deadline, or because its run was stopped) and
reaped; and the sandboxes running a snippet now, by the run they run for."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field

from django.conf import settings

from sandbox.cgroups import SnippetCgroup
from sandbox.fence import Channel
from sandbox.output import CappedReader
from sandbox.policies import MIB, Limits
from sandbox.reaper import Reaper
from sandbox.snippet import Execution, ForRun, MemoryExceeded


@dataclass(eq=False)  # each is its own process: held in sets by identity (RunningSnippets)
class Launched:
    """An interpreter started and waiting for its program on stdin, its output being drained."""

    process: subprocess.Popen[bytes]
    stdout: CappedReader
    stderr: CappedReader
    memory: SnippetCgroup | None  # its cgroups, removed once it has ended
    saver: Channel | None  # to the saver of its writes: sandbox/overlay.py
    reaper: Reaper  # told when it has been reaped: what it left is the reaper's then
    # Held while it is reaped or killed from another thread, so a kill never reaches a pid that
    # was reaped and could have been reused.
    lock: threading.Lock = field(default_factory=threading.Lock)
    reaped: bool = False
    stopped: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(
        self,
        code: str,
        limits: Limits,
        policy: str,
        *,
        run: ForRun | None = None,
        running: RunningSnippets | None = None,
    ) -> Execution:
        """Run `code` in it; held in `running` under its run meanwhile, so a stop kills it."""
        with running.running(run, self) if running is not None else nullcontext():
            if self.saver is not None:
                self.saver.give(run.run_id if run else None, run.attempt if run else 0)
            feed(self.process, code)
            timed_out = not exited_within(self.process, limits.timeout)
            if timed_out:
                self.kill()
            self.reap()
        # The saver holds both pipes until it has saved, after a kill too.
        self.stdout.join()
        self.stderr.join()
        files_saved, files_note = self.saver.outcome() if self.saver else (True, "")
        timed_out = timed_out and not self.stopped
        return Execution(
            exit_status=None if timed_out or self.stopped else self.process.returncode,
            stdout=self.stdout.text(),
            stderr=self.stderr.text(),
            timed_out=timed_out,
            output_truncated=self.stdout.truncated or self.stderr.truncated,
            policy=policy,
            stopped=self.stopped,
            files_saved=files_saved,
            files_note=files_note,
            memory_exceeded=self.release_memory(limits),
        )

    def release_memory(self, limits: Limits) -> MemoryExceeded | None:
        """Remove its cgroups, once it has ended; whether the OOM killer killed processes of it."""
        if self.memory is None:
            return None
        bound = self.memory.release()
        if bound is None:
            return None
        person_bytes = settings.LOOP_SANDBOX_PERSON_MEMORY_MB * MIB
        return MemoryExceeded(bound, limits.memory_bytes if bound == "snippet" else person_bytes)

    def stop(self) -> bool:
        """Kill it because its run was stopped (from any thread); False if it had ended already,
        on its own or at its deadline, so its result stands, or was stopped before."""
        with self.lock:
            if self.stopped or self.reaped or has_exited(self.process.pid):
                return False
            self.stopped = True
            self.kill()
            return True

    def reap(self) -> None:
        """Wait for it to end (the caller has seen it end, or killed it) and reap it."""
        with self.lock:
            self.process.wait()
            self.reaped = True
        self.reaper.reaped(self.process.pid)

    def kill(self) -> None:
        # The group is setpriv/prlimit/bwrap (one exec chain), bwrap's namespace init and whatever
        # the snippet left in it; the init's death takes the rest of its pid namespace down. The
        # kernel signals a group and a fork under way in it alike, so nothing is missed. The
        # process is not reaped yet, so its pid (and group id) cannot have been reused.
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def discard(self) -> None:
        """Kill a sandbox that will run nothing, reap it, and close its stdin."""
        self.kill()
        self.reap()
        if self.process.stdin is not None:
            self.process.stdin.close()
        if self.saver is not None:
            self.saver.close()
        if self.memory is not None:
            self.memory.release()


class RunningSnippets:
    """The sandboxes running a snippet now, by the run they run for.

    Stopping a run (a cancel, or its worker handing it back) must not wait out a 60-second
    snippet: the thread that stops it (the run's watcher) kills the run's sandboxes while the
    run's own thread waits on them in Launched.finish.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_run: dict[int, set[Launched]] = {}

    @contextmanager
    def running(self, run: ForRun | None, sandbox: Launched) -> Iterator[None]:
        """Hold the sandbox under its run while it runs the snippet."""
        if run is None:
            yield
            return
        with self.lock:
            self.by_run.setdefault(run.run_id, set()).add(sandbox)
        try:
            if run.stopped is not None and run.stopped():
                sandbox.stop()  # stopped before kill_run could see this sandbox
            yield
        finally:
            with self.lock:
                sandboxes = self.by_run[run.run_id]
                sandboxes.discard(sandbox)
                if not sandboxes:
                    del self.by_run[run.run_id]

    def kill(self, run_id: int) -> int:
        with self.lock:
            sandboxes = list(self.by_run.get(run_id, ()))
        return sum(sandbox.stop() for sandbox in sandboxes)

    def forget(self) -> None:
        """In a forked child: the parent's sandboxes are not this process's to kill."""
        self.lock = threading.Lock()
        self.by_run = {}


def feed(process: subprocess.Popen[bytes], code: str) -> None:
    if process.stdin is None:
        raise ValueError("The sandbox process needs stdin=PIPE.")
    try:
        with process.stdin:
            process.stdin.write(code.encode())
    except BrokenPipeError:
        pass  # the sandbox died before reading its code; its exit status and stderr say why


def has_exited(pid: int) -> bool:
    """Whether a child has ended, without reaping it (its pid stays ours until finish reaps)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def exited_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait on a pidfd: woken the moment the process exits (Popen.wait(timeout) polls in
    growing sleeps, which would add up to tens of milliseconds to every snippet)."""
    pidfd = os.pidfd_open(process.pid)
    try:
        poller = select.poll()  # not select(): a busy worker's descriptors pass 1024
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)
