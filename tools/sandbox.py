"""Run an untrusted Python snippet: bubblewrap namespaces, prlimit limits, an unprivileged uid.

The snippet sees a read-only /usr (the interpreter and its libraries), its user's workspace as the
only writable directory, a small /tmp, no network, no host processes, no environment. Limits are
set by prlimit (hard and soft alike, so the snippet cannot raise them) and hold for an unprivileged
uid only. When the worker is root, each user's snippets run as a host uid of their own (the owner
of their workspace, LOOP_SANDBOX_UID_BASE + user id), so the process limit, which the kernel
counts per uid, is each user's own budget. Memory is bounded per snippet (all its processes and
its tmpfs together) and per person by cgroups (tools.cgroups), where the machine has them, and per
process by RLIMIT_AS everywhere. Every sandbox is forked by one long-lived thread
(Launcher), what outlives its sandbox is reaped by this process (Reaper), a wall-clock timeout
kills the whole tree, and output is read with a byte cap. A stopped run's snippets are killed at
once from any thread (kill_run), their writes saved as at a timeout.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import queue
import resource
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from tools import overlay
from tools.base import ToolDenied, ToolError
from tools.cgroups import MEMORY, Bound, CgroupError, SnippetCgroup
from tools.fence import Channel, fence_directory
from tools.overlay import REFUSED
from workspace.directory import UID_CEILING, Identity
from workspace.quota import Quota

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
WORKSPACE_MOUNT = "/workspace"
PIPE_CAPACITY = 65536  # Linux's default; bwrap's options take a few hundred bytes


class SandboxUnavailable(ToolDenied):
    """The configured sandbox cannot run here. What the model reads, and the person on its card,
    says so in plain words, for there is nothing either can do about it; why and how to fix it
    (`detail`: a package, a sysctl, a setting) is the operator's, in the worker's log and in
    `manage.py sandboxcheck` and the system checks."""

    SAID = (
        "run_code is not available on this site right now: the sandbox it runs code in cannot "
        "start. Nothing you do can fix that, and its operators see why. Do not call run_code "
        "again in this run; answer with what you can do without running code."
    )

    def __init__(self, detail: str) -> None:
        super().__init__(self.SAID)
        self.detail = detail
        logger.error("run_code's sandbox cannot run: %s", detail)


class ProcessLimitReached(ToolError):
    """The snippets of one uid hold every process their budget allows; the next must wait."""


@dataclass(frozen=True)
class Limits:
    timeout: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MIB
    max_processes: int = 64
    max_file_bytes: int = 16 * MIB
    max_open_files: int = 64
    tmp_bytes: int = 16 * MIB
    output_bytes: int = 64 * 1024

    @classmethod
    def from_settings(cls, timeout: float) -> Limits:
        return cls(
            timeout=timeout,
            # One second over the wall clock, so a busy loop ends as a timeout, not a CPU kill.
            cpu_seconds=int(timeout) + 1,
            memory_bytes=settings.LOOP_SANDBOX_MEMORY_MB * MIB,
            max_processes=settings.LOOP_SANDBOX_MAX_PROCESSES,
        )


@dataclass(frozen=True)
class MemoryExceeded:
    """The kernel's OOM killer killed processes of a snippet: its own bound, or its person's
    (their snippets running at once together) was reached."""

    bound: Bound
    limit_bytes: int

    def describe(self) -> str:
        """What the model reads: what was killed, and why."""
        mib = self.limit_bytes // MIB
        if self.bound == "snippet":
            return (
                f"killed: the program's processes together used more than {mib} MiB of memory "
                "(what it keeps in /tmp and writes counts too)."
            )
        return (
            f"killed: your programs running at once together used more than {mib} MiB of "
            "memory; this one was killed. Run fewer at once, or use less memory."
        )


@dataclass(frozen=True)
class Execution:
    """What a snippet did: exit status (None when killed at the deadline or because its run was
    stopped), capped output."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    policy: str
    stopped: bool = False  # killed by kill_run: the run it ran for was stopped
    # Whether what it wrote was saved (tools/fence.py), and what its result says about that.
    files_saved: bool = True
    files_note: str = ""
    memory_exceeded: MemoryExceeded | None = None  # processes of it killed by the OOM killer


@dataclass(frozen=True)
class ForRun:
    """The run a snippet runs for, so that stopping the run kills it (kill_run).

    `stopped` says whether the run has been stopped already: a snippet that starts after kill_run
    looked (it had not reached its sandbox yet) is killed as soon as it is registered, so no
    snippet of a stopped run outlives the stop. It must turn true before kill_run is called.
    """

    run_id: int
    stopped: Callable[[], bool] | None = None
    attempt: int = 0  # the run's claim: a saver whose run was claimed again saves nothing


class Sandbox(Protocol):
    policy: str

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution: ...


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


def quota_prefix(
    workspace: Path,
    saver: int,
    *,
    limits: Limits | None = None,
    memory: SnippetCgroup | None = None,
) -> list[str]:
    """The command that bounds a sandboxed snippet's writes by the quota; the sandbox follows.

    It runs as the snippet's unprivileged identity (after setpriv). `saver` is the descriptor of
    the saver's end of its channel to the worker (tools.fence), and the saver reads the workspace
    runs' fences where tools.fence writes them. With `limits`, it also sets the process budget
    first (see process_budget_prefix), and, after forking the saver, enters the program cgroup
    (`memory`) and sets the snippet's rlimits (see limits_prefix), so the saver it leaves behind
    is bound by neither the snippet's memory, file-size nor descriptor limit: what `prlimit`, a
    shell step and another `prlimit` did, for none of their start-ups.
    """
    quota = Quota.from_settings()
    steps: list[str] = []
    if limits is not None:
        steps += ["--budget", _limits_text(process_budget(limits))]
        if memory is not None:
            steps += ["--cgroup", str(memory.program_entry)]
        steps += ["--limits", _limits_text(snippet_rlimits(limits))]
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


def _limits_text(rlimits: dict[int, int]) -> str:
    """tools/overlay.py's LIMITS: RESOURCE=VALUE pairs, each set hard and soft."""
    return ",".join(f"{number}={value}" for number, value in rlimits.items())


def identity_prefix(workspace: Path) -> list[str]:
    """setpriv: no new privileges ever; as root, also become the workspace's sandbox uid and drop
    every capability and supplementary group."""
    prefix = [_require_program("setpriv", "util-linux"), "--no-new-privs"]
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


def process_budget(limits: Limits) -> dict[int, int]:
    """The uid's process limit, set before anything in the chain makes a user namespace.

    The kernel counts a uid's processes in every user namespace up to the host, and checks each
    level against the limit its creator had: a namespace made under the worker's own limit would
    count against that, not this one. Set first, it bounds all the uid's sandboxes together.
    """
    return {resource.RLIMIT_NPROC: limits.max_processes}


def process_budget_prefix(limits: Limits) -> list[str]:
    """prlimit --nproc (process_budget), for the chain without the quota's overlay."""
    processes = limits.max_processes
    return [_require_program("prlimit", "util-linux"), f"--nproc={processes}:{processes}", "--"]


def memory_cgroup(workspace: Path, limits: Limits) -> SnippetCgroup | None:
    """The cgroups that bound this sandbox's memory, and its person's (tools.cgroups); None
    where the machine gives none: then RLIMIT_AS bounds each process, and nothing more."""
    owner = workspace_owner(workspace)
    person = str(owner.uid) if owner is not None else f"w{os.stat(workspace).st_ino}"
    try:
        return MEMORY.snippet(person, None if owner is None else owner.uid, limits.memory_bytes)
    except CgroupError as error:
        raise SandboxUnavailable(f"run_code cannot run: {error}") from error


def memory_prefixes(memory: SnippetCgroup | None) -> tuple[list[str], list[str]]:
    """The chain's steps into the launch cgroup (first) and into the program's (before the
    sandbox proper), so each process is bounded before it could allocate."""
    if memory is None:
        return [], []
    return memory.launch_prefix(), memory.program_prefix()


def snippet_rlimits(limits: Limits) -> dict[int, int]:
    """The per-process limits. RLIMIT_AS stays as a backstop under the cgroup's bound (one
    process cannot use more than all of them together), and is the only bound without one."""
    return {
        resource.RLIMIT_CPU: limits.cpu_seconds,
        resource.RLIMIT_AS: limits.memory_bytes,
        resource.RLIMIT_FSIZE: limits.max_file_bytes,
        resource.RLIMIT_NOFILE: limits.max_open_files,
        resource.RLIMIT_CORE: 0,
    }


PRLIMIT_OPTIONS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_CORE: "--core",
}


def limits_prefix(limits: Limits) -> list[str]:
    """prlimit with the snippet's limits (snippet_rlimits), hard and soft alike, for the chain
    without the quota's overlay."""
    options = [
        f"{PRLIMIT_OPTIONS[number]}={value}:{value}"
        for number, value in snippet_rlimits(limits).items()
    ]
    return [_require_program("prlimit", "util-linux"), *options, "--"]


class BubblewrapSandbox:
    policy = "bubblewrap"

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution:
        sandbox = WARM.take(workspace, limits) or self.launch(workspace, limits).result()
        execution = sandbox.finish(code, limits, self.policy, run=run)
        _raise_if_bwrap_failed(execution, limits)
        if start_next and not execution.stopped:  # a stopped run calls no more
            WARM.prepare(workspace, limits, self.launch)
        return execution

    def launch(self, workspace: Path, limits: Limits) -> Future[Launched]:
        bwrap, *options, separator = self.bwrap_arguments(workspace, limits)
        saver = Channel()
        # bwrap reads its options from a pipe: in its argv they would show the snippet the
        # host's path of the workspace (/proc/1/cmdline, bwrap's init).
        options_fd = _options_pipe(options)
        memory = None
        try:
            memory = memory_cgroup(workspace, limits)
            # Bounds what the snippet writes, and fences it (tools/overlay.py), between the
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
        return LAUNCHER.start(argv, limits, memory=memory, options_fd=options_fd, saver=saver)

    def bwrap_arguments(self, workspace: Path, limits: Limits) -> list[str]:
        return [
            _require_program("bwrap", "bubblewrap"),
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
            *_environment(),
            "--ro-bind",
            "/usr",
            "/usr",
            *_merged_usr_links(),
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


class SubprocessSandbox:
    """Opt-in only (LOOP_SANDBOX=subprocess): rlimits and a timeout, but no isolation at all."""

    policy = "subprocess (no isolation)"

    def run(
        self,
        code: str,
        workspace: Path,
        limits: Limits,
        *,
        start_next: bool = True,
        run: ForRun | None = None,
    ) -> Execution:
        memory = memory_cgroup(workspace, limits)
        into_launch, into_program = memory_prefixes(memory)
        argv = [
            *into_launch,
            *identity_prefix(workspace),
            *process_budget_prefix(limits),
            *into_program,
            *limits_prefix(limits),
            *interpreter_arguments(),
        ]
        execution = execute(argv, code, limits, self.policy, cwd=workspace, run=run, memory=memory)
        _raise_if_memory_refused(execution)
        return execution


SANDBOXES: dict[str, type[BubblewrapSandbox] | type[SubprocessSandbox]] = {
    "bubblewrap": BubblewrapSandbox,
    "subprocess": SubprocessSandbox,
}


def get_sandbox() -> Sandbox:
    try:
        return SANDBOXES[settings.LOOP_SANDBOX]()
    except KeyError:
        choices = ", ".join(SANDBOXES)
        raise ImproperlyConfigured(
            f"LOOP_SANDBOX must be one of {choices}, not {settings.LOOP_SANDBOX!r}."
        ) from None


@dataclass(frozen=True)
class LaunchRequest:
    argv: list[str]
    limits: Limits
    cwd: Path | None
    memory: SnippetCgroup | None
    options_fd: int | None  # bwrap's options, to pass to it and close here once started
    saver: Channel | None  # to the saver of its writes: tools/overlay.py
    future: Future[Launched]


class Launcher:
    """The one thread of this process that forks sandboxes.

    bwrap --die-with-parent arms PR_SET_PDEATHSIG, whose "parent" is the thread that forked, not
    the process: a sandbox forked by a short-lived thread (a tool call's, or one started only to
    warm a sandbox) is killed as soon as that thread ends. Forked from this thread, which lives as
    long as the process, every sandbox dies with the worker, a SIGKILLed one included, and never
    before.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: queue.SimpleQueue[LaunchRequest] = queue.SimpleQueue()
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

    def forget(self) -> None:
        """In a forked child: the parent's launcher thread does not exist here."""
        self.lock = threading.Lock()
        self.requests = queue.SimpleQueue()
        self.thread = None

    def _serve(self) -> None:
        if os.geteuid() == 0:
            REAPER.adopt_orphans()
        while True:
            request = self.requests.get()
            try:
                with REAPER.lock:  # no sandbox may be mistaken for an orphan before it is tracked
                    sandbox = launch(request)
                    REAPER.started.add(sandbox.process.pid)
                request.future.set_result(sandbox)
            except BaseException as error:  # the caller's failure, never this thread's end
                if request.memory is not None:
                    request.memory.release()
                if request.saver is not None:
                    request.saver.close()
                request.future.set_exception(error)


LAUNCHER = Launcher()
PR_SET_CHILD_SUBREAPER = 36


class Reaper:
    """Reaps the sandbox processes whose parent ends before them.

    bwrap's namespace init outlives bwrap by a moment, and the workspace quota's saver outlives
    the sandbox by design. Their new parent would be PID 1, which in a container may reap them
    late or never, and a zombie still counts against its user's process limit. As root, the
    launcher makes this process a child subreaper, so they come to it instead; after each
    sandbox ends, the children of a sandbox uid that it did not start itself are each waited for
    on a pidfd by the reaper thread.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: set[int] = set()  # sandboxes this process started and has not reaped yet
        self.waiting: dict[int, int] = {}  # pidfd: the pid of an orphan to reap when it ends
        self.wake_reader, self.wake_writer = os.pipe()
        self.thread: threading.Thread | None = None

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
            if self.thread is None:
                return
            waited = set(self.waiting.values())
            for orphan in _children() - self.started - waited:
                # Nobody else reaps it, so its pid cannot have been reused before the pidfd.
                if _runs_as_a_sandbox_uid(orphan):
                    with suppress(ProcessLookupError):
                        self.waiting[os.pidfd_open(orphan)] = orphan
        os.write(self.wake_writer, b"\0")

    def forget(self) -> None:
        """In a forked child: it is no subreaper, and nothing here is its to reap."""
        os.close(self.wake_reader)
        os.close(self.wake_writer)
        self.__init__()

    def _serve(self) -> None:
        while True:
            poller = select.poll()  # not select(): a busy worker's descriptors pass 1024
            with self.lock:
                for pidfd in [self.wake_reader, *self.waiting]:
                    poller.register(pidfd, select.POLLIN)
            for pidfd, _ in poller.poll():
                if pidfd == self.wake_reader:
                    os.read(pidfd, 4096)
                    continue
                with self.lock:
                    orphan = self.waiting.pop(pidfd)
                with suppress(ChildProcessError):
                    os.waitpid(orphan, 0)
                os.close(pidfd)


REAPER = Reaper()


def _children() -> set[int]:
    """This process's children, whichever of its threads each is attached to."""
    children: set[int] = set()
    for thread in os.listdir("/proc/self/task"):
        with suppress(FileNotFoundError):  # a thread that ended meanwhile
            children.update(
                map(int, Path(f"/proc/self/task/{thread}/children").read_text().split())
            )
    return children


def _runs_as_a_sandbox_uid(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # it ended and was reaped meanwhile
        return False
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    return settings.LOOP_SANDBOX_UID_BASE <= uid < UID_CEILING


class Warm:
    """A sandbox started ahead for one workspace and limits, and the timer that retires it."""

    def __init__(
        self,
        key: tuple[Path, Limits],
        sandbox: Future[Launched],
        idle_seconds: float,
        expire: Callable[[Warm], None],
    ) -> None:
        self.key, self.sandbox = key, sandbox
        self.expiry = threading.Timer(idle_seconds, expire, args=(self,))
        self.expiry.daemon = True

    def discard(self) -> None:
        self.expiry.cancel()
        if self.sandbox.exception() is None:  # waits for a start under way: it is killed too
            self.sandbox.result().discard()


class MachineLoad:
    """How busy the machine's CPUs were over the last second or so, from /proc/stat: read at most
    once a `window`, by whichever call asks first after it; 0.0 until two readings exist."""

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self.lock = threading.Lock()
        self.reading: tuple[float, int, int] | None = None  # (monotonic time, busy, all) ticks
        self.share = 0.0

    def busy_share(self) -> float:
        now = time.monotonic()
        with self.lock:
            if self.reading is not None and now - self.reading[0] < self.window:
                return self.share
            try:
                busy, total = _cpu_ticks()
            except (OSError, ValueError):  # no /proc/stat to read: taken as quiet, as before
                return 0.0
            if self.reading is not None and total > self.reading[2]:
                self.share = (busy - self.reading[1]) / (total - self.reading[2])
            self.reading = (now, busy, total)
            return self.share


def _cpu_ticks() -> tuple[int, int]:
    """The machine's CPU time so far, in ticks: busy, and all (idle and waiting for I/O too)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = sum(ticks[3:5])  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


class WarmSandboxes:
    """One sandbox per recently used workspace, started ahead and idling on stdin.

    An agent calls run_code again and again in a run; starting the next sandbox while the model
    thinks takes the namespace and interpreter start-up off the call's latency. A warm sandbox
    serves only the workspace and limits it was built for, runs nothing until it gets a program,
    counts against its user's process budget while it idles, dies with the worker, and is killed
    after `idle_seconds` unused. At most `capacity` idle at once.

    Starting ahead trades CPU for latency, and is wasted whenever the run calls no other snippet
    (a sandbox start is 20 to 30 ms of CPU; a call served ahead saves about as much wall time).
    When the machine's CPUs were at least `BUSY_SHARE` busy over the last second, CPU is what
    the runs wait for: then at most `busy_capacity` idle at once, so a burst of many people's
    runs, each calling run_code once, spends almost nothing on sandboxes nobody uses.
    """

    BUSY_SHARE = 0.8

    def __init__(
        self,
        idle_seconds: float = 120.0,
        capacity: int = 16,
        *,
        busy_capacity: int = 2,
        load: Callable[[], float] | None = None,
    ) -> None:
        self.idle_seconds, self.capacity = idle_seconds, capacity
        self.busy_capacity = min(busy_capacity, capacity)
        self.load = load or MachineLoad().busy_share
        self.idle: dict[tuple[Path, Limits], Warm] = {}
        self.lock = threading.Lock()
        self.served = 0  # calls a sandbox started ahead has served: what tests and the bench read

    def take(self, workspace: Path, limits: Limits) -> Launched | None:
        with self.lock:
            warm = self.idle.pop((workspace, limits), None)
        if warm is None:
            return None
        warm.expiry.cancel()
        if warm.sandbox.exception() is not None:
            return None
        sandbox = warm.sandbox.result()
        if not sandbox.alive():
            sandbox.discard()
            return None
        with self.lock:
            self.served += 1
        return sandbox

    def prepare(
        self, workspace: Path, limits: Limits, start: Callable[[Path, Limits], Future[Launched]]
    ) -> None:
        if not settings.LOOP_SANDBOX_WARM:
            return
        key = (workspace, limits)
        with self.lock:
            if key in self.idle:
                # A parallel call's sandbox already waits: starting another only to kill one
                # would spend the user's process budget for nothing.
                return
            if len(self.idle) >= self.room():
                # Full: this one goes cold next time. Evicting an idle sandbox to start this
                # one would, in a burst of many people's runs, start sandboxes only to kill
                # them (each start is tens of ms of CPU: docs/engine.md, "Where a run's CPU
                # goes").
                return
            warm = Warm(key, start(workspace, limits), self.idle_seconds, self._expire)
            self.idle[key] = warm
        warm.expiry.start()

    def room(self) -> int:
        """How many may idle now: fewer while the machine's CPUs are busy."""
        return self.busy_capacity if self.load() >= self.BUSY_SHARE else self.capacity

    def _expire(self, warm: Warm) -> None:
        with self.lock:
            if self.idle.get(warm.key) is not warm:
                return  # taken in the meantime
            del self.idle[warm.key]
        warm.discard()

    def forget(self) -> None:
        """In a forked child: the parent's sandboxes are not this process's to use or kill."""
        self.lock = threading.Lock()
        self.idle = {}

    def drain(self) -> None:
        """Kill every idle sandbox, including those still starting (tests, shutdown)."""
        with self.lock:
            entries = list(self.idle.values())
            self.idle.clear()
        for warm in entries:
            warm.discard()


WARM = WarmSandboxes()


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


RUNNING = RunningSnippets()


def kill_run(run_id: int) -> int:
    """Kill every sandbox running a snippet for this run now, from any thread; how many it killed.

    Each such snippet ends as a stopped Execution (run_code's result says the run was stopped),
    and what it wrote before it was killed is saved, as at a timeout. A snippet that had just
    ended on its own keeps its result and is not counted.
    """
    return RUNNING.kill(run_id)


for forget in (LAUNCHER.forget, REAPER.forget, WARM.forget, RUNNING.forget):
    os.register_at_fork(after_in_child=forget)


# The snippet's interpreter starts without the site module (-S), which costs about 2.5 ms of CPU a
# snippet (its imports, the dist-packages' .pth files, sitecustomize). This program puts back what
# a snippet sees of site: the interpreter's dist-packages on sys.path (after the standard library,
# where site puts them), exit() and quit(); then it runs the program on stdin as `python3 -I -`
# would: as __main__, __file__ "<stdin>", argv ["-"], an uncaught exception printed by
# sys.excepthook without this program's frame, exit status 1. What differs: sys.flags.no_site,
# os not imported ahead, what a .pth file would run, and a recursion limit two frames nearer.
SNIPPET_MAIN = """\
import sys as _sys, builtins as _builtins, _sitebuiltins
_sys.path += {paths!r}
_builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
_builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
_sys.argv[:] = ["-"]
def _main(sys=_sys, main=globals()):
    for name in ("_sys", "_builtins", "_sitebuiltins", "_main"):
        del main[name]
    main["__file__"], main["__cached__"] = "<stdin>", None
    try:
        exec(compile(sys.stdin.buffer.read(), "<stdin>", "exec"), main)
    except SystemExit:
        raise
    except BaseException as error:
        error.__traceback__ = error.__traceback__.tb_next
        sys.excepthook(type(error), error, error.__traceback__)
        raise SystemExit(1) from None
_main()
"""
_SITE_PACKAGES = "import os, site; print(*filter(os.path.isdir, site.getsitepackages()), sep='\\n')"


def interpreter_arguments() -> list[str]:
    """The snippet's interpreter. -I: no PYTHON* variables, no user site-packages, no script
    directory on sys.path; the code itself comes on stdin."""
    python = settings.LOOP_SANDBOX_PYTHON
    paths = _site_packages(python)
    if paths is None:
        return [python, "-I", "-"]
    return [python, "-I", "-S", "-c", SNIPPET_MAIN.format(paths=list(paths))]


@functools.cache
def _site_packages(python: str) -> tuple[str, ...] | None:
    """The directories the site module adds to this interpreter's sys.path, asked of it once a
    process (with -S: nothing of a .pth file or sitecustomize runs); None if it cannot say, and
    then snippets start with the site module."""
    try:
        listed = subprocess.run(  # noqa: S603 (the configured interpreter, a fixed program)
            [python, "-I", "-S", "-c", _SITE_PACKAGES],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=_environment_for_host_process(),
        )
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("run_code: %s could not list its site-packages: %s", python, error)
        return None
    return tuple(listed.stdout.splitlines())


def execute(
    argv: list[str],
    code: str,
    limits: Limits,
    policy: str,
    cwd: Path | None,
    *,
    run: ForRun | None = None,
    memory: SnippetCgroup | None = None,
) -> Execution:
    """Run argv with the code on stdin; kill its whole process group at the deadline."""
    launched = LAUNCHER.start(argv, limits, cwd, memory=memory).result()
    return launched.finish(code, limits, policy, run=run)


@dataclass(eq=False)  # each is its own process: held in sets by identity (RunningSnippets)
class Launched:
    """An interpreter started and waiting for its program on stdin, its output being drained."""

    process: subprocess.Popen[bytes]
    stdout: CappedReader
    stderr: CappedReader
    memory: SnippetCgroup | None  # its cgroups, removed once it has ended
    saver: Channel | None  # to the saver of its writes: tools/overlay.py
    # Held while it is reaped or killed from another thread, so a kill never reaches a pid that
    # was reaped and could have been reused.
    lock: threading.Lock = field(default_factory=threading.Lock)
    reaped: bool = False
    stopped: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(
        self, code: str, limits: Limits, policy: str, *, run: ForRun | None = None
    ) -> Execution:
        with RUNNING.running(run, self):
            if self.saver is not None:
                self.saver.give(run.run_id if run else None, run.attempt if run else 0)
            _feed(self.process, code)
            timed_out = not _exited_within(self.process, limits.timeout)
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
            if self.stopped or self.reaped or _has_exited(self.process.pid):
                return False
            self.stopped = True
            self.kill()
            return True

    def reap(self) -> None:
        """Wait for it to end (the caller has seen it end, or killed it) and reap it."""
        with self.lock:
            self.process.wait()
            self.reaped = True
        REAPER.reaped(self.process.pid)

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


def launch(request: LaunchRequest) -> Launched:
    options = () if request.options_fd is None else (request.options_fd,)
    saver = () if request.saver is None else (request.saver.saver_end(),)
    try:
        process = subprocess.Popen(  # noqa: S603 (argv is built above, never by a shell)
            request.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=request.cwd,
            env=_environment_for_host_process(),
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
    )


def _options_pipe(options: list[str]) -> int:
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


class CappedReader:
    """Drain a pipe to its end, keeping at most `cap` bytes, so a flood cannot fill our memory."""

    def __init__(self, pipe: IO[bytes] | None, cap: int) -> None:
        if pipe is None:
            raise ValueError("CappedReader needs a pipe (stdout=PIPE or stderr=PIPE).")
        self.pipe, self.cap = pipe, cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        with self.pipe:
            while chunk := self.pipe.read1(65536):  # type: ignore[attr-defined]
                room = self.cap - self.kept
                if len(chunk) > room:
                    self.truncated = True
                    chunk = chunk[:room]
                if chunk:
                    self.chunks.append(chunk)
                    self.kept += len(chunk)

    def join(self) -> None:
        self.thread.join()

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _feed(process: subprocess.Popen[bytes], code: str) -> None:
    if process.stdin is None:
        raise ValueError("The sandbox process needs stdin=PIPE.")
    try:
        with process.stdin:
            process.stdin.write(code.encode())
    except BrokenPipeError:
        pass  # the sandbox died before reading its code; its exit status and stderr say why


def _has_exited(pid: int) -> bool:
    """Whether a child has ended, without reaping it (its pid stays ours until finish reaps)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _exited_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait on a pidfd: woken the moment the process exits (Popen.wait(timeout) polls in
    growing sleeps, which would add up to tens of milliseconds to every snippet)."""
    pidfd = os.pidfd_open(process.pid)
    try:
        poller = select.poll()  # not select(): a busy worker's descriptors pass 1024
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)


def _environment() -> list[str]:
    variables = {
        "PATH": "/usr/bin:/bin",
        "HOME": WORKSPACE_MOUNT,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    return [part for name, value in variables.items() for part in ("--setenv", name, value)]


def _environment_for_host_process() -> dict[str, str]:
    """setpriv, prlimit and (in subprocess mode) the snippet get nothing of the worker's secrets."""
    return {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"}


def _merged_usr_links() -> list[str]:
    """Mirror the host's /bin, /lib, /lib64, /sbin: symlinks into /usr on merged-/usr systems."""
    arguments: list[str] = []
    for name in ("bin", "sbin", "lib", "lib64"):
        path = Path("/", name)
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    return arguments


def _require_program(name: str, package: str) -> str:
    path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise SandboxUnavailable(
            f"run_code cannot run: {name} is not installed. Install the {package} package "
            f"(Debian: apt-get install {package})."
        )
    return path


def _raise_if_bwrap_failed(execution: Execution, limits: Limits) -> None:
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
            raise ProcessLimitReached(_process_limit_message(limits), policy=execution.policy)
        _raise_if_memory_refused(execution)
        raise SandboxUnavailable(
            f"run_code cannot run: bubblewrap could not build the sandbox ({reason}). The kernel "
            "must allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0). An operator may opt into LOOP_SANDBOX=subprocess, "
            "which gives no isolation."
        )


def _raise_if_memory_refused(execution: Execution) -> None:
    """The step into the snippet's cgroup failed, so nothing of the snippet ran: fail closed."""
    if execution.exit_status == 1 and execution.stderr.strip() == REFUSED:
        raise SandboxUnavailable(f"run_code cannot run: {REFUSED.removeprefix('bwrap: ')}.")


def _process_limit_message(limits: Limits) -> str:
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
