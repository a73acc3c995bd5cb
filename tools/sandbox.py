"""Run an untrusted Python snippet: bubblewrap namespaces, prlimit limits, an unprivileged uid.

The snippet sees a read-only /usr (the interpreter and its libraries), its user's workspace as the
only writable directory, a small /tmp, no network, no host processes, no environment. Limits are
set by prlimit (hard and soft alike, so the snippet cannot raise them) and hold for an unprivileged
uid only, so when the worker is root the snippet runs as LOOP_SANDBOX_USER. A wall-clock timeout
kills the whole tree, and output is read with a byte cap.
"""

from __future__ import annotations

import logging
import os
import pwd
import select
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from tools.base import ToolDenied
from tools.quota import sandbox_prefix as quota_prefix

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
WORKSPACE_MOUNT = "/workspace"


class SandboxUnavailable(ToolDenied):
    """The configured sandbox cannot run here; the message says why and how to fix it."""


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
class Execution:
    """What a snippet did: exit status (None when killed at the deadline), capped output."""

    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    policy: str


@dataclass(frozen=True)
class Identity:
    name: str
    uid: int
    gid: int


class Sandbox(Protocol):
    policy: str

    def run(
        self, code: str, workspace: Path, limits: Limits, *, start_next: bool = True
    ) -> Execution: ...


def sandbox_identity() -> Identity | None:
    """The host user snippets run as when the worker is root; None when it is not (then the
    worker's own unprivileged uid runs them)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(settings.LOOP_SANDBOX_USER)
    except KeyError:
        return None
    return Identity(entry.pw_name, entry.pw_uid, entry.pw_gid)


def identity_prefix() -> list[str]:
    """setpriv: no new privileges ever; as root, also drop to the sandbox user and all caps."""
    prefix = [_require_program("setpriv", "util-linux"), "--no-new-privs"]
    if os.geteuid() == 0:
        identity = sandbox_identity()
        if identity is None:
            raise SandboxUnavailable(
                f"run_code refuses to run snippets as root, and the sandbox user "
                f"{settings.LOOP_SANDBOX_USER!r} does not exist. Create it with: useradd --system "
                f"--no-create-home --shell /usr/sbin/nologin {settings.LOOP_SANDBOX_USER}"
            )
        prefix += [
            f"--reuid={identity.uid}",
            f"--regid={identity.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    return [*prefix, "--"]


def limits_prefix(limits: Limits) -> list[str]:
    def hard(value: int) -> str:
        return f"{value}:{value}"

    return [
        _require_program("prlimit", "util-linux"),
        f"--cpu={hard(limits.cpu_seconds)}",
        f"--as={hard(limits.memory_bytes)}",
        f"--nproc={hard(limits.max_processes)}",
        f"--fsize={hard(limits.max_file_bytes)}",
        f"--nofile={hard(limits.max_open_files)}",
        "--core=0:0",
        "--",
    ]


class BubblewrapSandbox:
    policy = "bubblewrap"

    def run(
        self, code: str, workspace: Path, limits: Limits, *, start_next: bool = True
    ) -> Execution:
        sandbox = WARM.take(workspace, limits) or self.launch(workspace, limits)
        execution = sandbox.finish(code, limits, self.policy)
        _raise_if_bwrap_failed(execution)
        if start_next:
            WARM.prepare(workspace, limits, self.launch)
        return execution

    def launch(self, workspace: Path, limits: Limits) -> Launched:
        argv = [
            *identity_prefix(),
            *quota_prefix(workspace),  # bounds what the snippet writes: tools/overlay.py
            *limits_prefix(limits),
            *self.bwrap_arguments(workspace, limits),
            *interpreter_arguments(),
        ]
        return launch(argv, limits, cwd=None)

    def bwrap_arguments(self, workspace: Path, limits: Limits) -> list[str]:
        return [
            _require_program("bwrap", "bubblewrap"),
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
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
        self, code: str, workspace: Path, limits: Limits, *, start_next: bool = True
    ) -> Execution:
        argv = [*identity_prefix(), *limits_prefix(limits), *interpreter_arguments()]
        return execute(argv, code, limits, self.policy, cwd=workspace)


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


class WarmSandboxes:
    """One sandbox per recently used workspace, started ahead and idling on stdin.

    An agent calls run_code again and again in a run; starting the next sandbox while the model
    thinks takes the namespace and interpreter start-up off the call's latency. A warm sandbox
    serves only the workspace and limits it was built for, runs nothing until it gets a program,
    dies with the worker, and is killed after `idle_seconds` unused.
    """

    def __init__(self, idle_seconds: float = 120.0, capacity: int = 16) -> None:
        self.idle_seconds, self.capacity = idle_seconds, capacity
        self.idle: dict[tuple[Path, Limits], tuple[Launched, threading.Timer]] = {}
        self.lock = threading.Lock()
        self.starting = 0  # sandboxes being started in the background right now
        self.started = threading.Condition(self.lock)

    def take(self, workspace: Path, limits: Limits) -> Launched | None:
        with self.lock:
            entry = self.idle.pop((workspace, limits), None)
        if entry is None:
            return None
        sandbox, expiry = entry
        expiry.cancel()
        return sandbox if sandbox.alive() else None

    def prepare(
        self, workspace: Path, limits: Limits, start: Callable[[Path, Limits], Launched]
    ) -> None:
        if settings.LOOP_SANDBOX_WARM:
            with self.lock:
                self.starting += 1
            thread = threading.Thread(target=self._start, args=(workspace, limits, start))
            thread.daemon = True
            thread.start()

    def _start(
        self, workspace: Path, limits: Limits, start: Callable[[Path, Limits], Launched]
    ) -> None:
        try:
            self._add(workspace, limits, start)
        finally:
            with self.lock:
                self.starting -= 1
                self.started.notify_all()

    def _add(
        self, workspace: Path, limits: Limits, start: Callable[[Path, Limits], Launched]
    ) -> None:
        try:
            sandbox = start(workspace, limits)
        except SandboxUnavailable:
            return
        expiry = threading.Timer(self.idle_seconds, self._expire, args=((workspace, limits),))
        expiry.daemon = True
        with self.lock:
            evicted = [self.idle.pop((workspace, limits), None)]
            if len(self.idle) >= self.capacity:
                evicted.append(self.idle.pop(next(iter(self.idle))))
            self.idle[(workspace, limits)] = (sandbox, expiry)
        expiry.start()
        for entry in filter(None, evicted):
            _discard(entry)

    def _expire(self, key: tuple[Path, Limits]) -> None:
        with self.lock:
            entry = self.idle.pop(key, None)
        if entry is not None:
            _discard(entry)

    def drain(self, timeout: float = 10.0) -> None:
        """Kill every idle sandbox, including those still starting (tests, shutdown)."""
        with self.lock:
            self.started.wait_for(lambda: self.starting == 0, timeout)
            entries = list(self.idle.values())
            self.idle.clear()
        for entry in entries:
            _discard(entry)


def _discard(entry: tuple[Launched, threading.Timer]) -> None:
    sandbox, expiry = entry
    expiry.cancel()
    sandbox.kill()
    sandbox.process.wait()


WARM = WarmSandboxes()


def interpreter_arguments() -> list[str]:
    # -I: ignore PYTHON* variables and the user's site-packages; the code itself comes on stdin.
    return [settings.LOOP_SANDBOX_PYTHON, "-I", "-"]


def execute(argv: list[str], code: str, limits: Limits, policy: str, cwd: Path | None) -> Execution:
    """Run argv with the code on stdin; kill its whole process group at the deadline."""
    return launch(argv, limits, cwd).finish(code, limits, policy)


@dataclass
class Launched:
    """An interpreter started and waiting for its program on stdin, its output being drained."""

    process: subprocess.Popen[bytes]
    stdout: CappedReader
    stderr: CappedReader

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(self, code: str, limits: Limits, policy: str) -> Execution:
        _feed(self.process, code)
        timed_out = not _exited_within(self.process, limits.timeout)
        if timed_out:
            self.kill()
        self.process.wait()
        self.stdout.join()
        self.stderr.join()
        return Execution(
            exit_status=None if timed_out else self.process.returncode,
            stdout=self.stdout.text(),
            stderr=self.stderr.text(),
            timed_out=timed_out,
            output_truncated=self.stdout.truncated or self.stderr.truncated,
            policy=policy,
        )

    def kill(self) -> None:
        # The group is setpriv/prlimit/bwrap (one exec chain) and anything sharing it. bwrap's
        # --die-with-parent and its pid namespace take everything inside down with it. The
        # process is not reaped yet, so its pid (and group id) cannot have been reused.
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def launch(argv: list[str], limits: Limits, cwd: Path | None) -> Launched:
    process = subprocess.Popen(  # noqa: S603 (argv is built above, never by a shell)
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=_environment_for_host_process(),
        start_new_session=True,
    )
    return Launched(
        process,
        CappedReader(process.stdout, limits.output_bytes),
        CappedReader(process.stderr, limits.output_bytes),
    )


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


def _exited_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait on a pidfd: woken the moment the process exits (Popen.wait(timeout) polls in
    growing sleeps, which would add up to tens of milliseconds to every snippet)."""
    pidfd = os.pidfd_open(process.pid)
    try:
        return bool(select.select([pidfd], [], [], timeout)[0])
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


def _raise_if_bwrap_failed(execution: Execution) -> None:
    """bwrap reports its own failures (no user namespaces, say) as `bwrap: ...` on stderr."""
    if (
        execution.exit_status == 1
        and not execution.stdout
        and execution.stderr.startswith("bwrap:")
    ):
        reason = execution.stderr.strip().splitlines()[0]
        raise SandboxUnavailable(
            f"run_code cannot run: bubblewrap could not build the sandbox ({reason}). The kernel "
            "must allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0). An operator may opt into LOOP_SANDBOX=subprocess, "
            "which gives no isolation."
        )
