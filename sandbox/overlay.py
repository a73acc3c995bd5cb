"""Bound what a snippet writes by the workspace quota, with the kernel doing the counting.

Run by the sandbox as `python3 -I -S overlay.py WORKSPACE MAX_BYTES MAX_FILES FENCES CHANNEL
[--budget LIMITS] [--cgroup PROCS] [--limits LIMITS] -- COMMAND...`, already as the unprivileged
identity snippets run as. It first sets the process budget (--budget: the uid's RLIMIT_NPROC, before
anything makes a user namespace). In a user and mount namespace of its own it lays an overlay over
the workspace whose upper layer is a tmpfs of the quota's size (bytes, and files plus an allowance
for the overlay's own entries), so nothing a snippet writes with its own syscalls reaches the disk
while it runs, and more than a whole quota fails at once with ENOSPC: no poll could stop a snippet
writing 160 MiB in 0.09 s. It then forks the saver (sandbox/overlay_save.py) into a session of its
own, so that killing the sandbox's process group at the timeout spares it; moves itself into the
snippet's program cgroup (--cgroup: the cgroup.procs file to write its pid to), sets the snippet's
limits (--limits) and execs COMMAND, the sandbox. The saver, forked before those two steps, is
bound by neither. It holds the sandbox's stdout and stderr until it has saved, so the worker sees
the call end only once its files are in place.

LIMITS are `RESOURCE=VALUE` pairs joined by commas, each resource by its number
(resource.RLIMIT_*, from the worker, whose kernel this is), each set hard and soft alike, so the
snippet cannot raise it. Doing these steps here, not in `prlimit` and a shell around this script,
spares every sandbox start three programs' start-up.

CHANNEL is the saver's end of a socket pair to the worker (sandbox/fence.py), which only the saver
keeps: on it the worker gives the ticket (the run and attempt the program runs for, and when it
started) as it gives the sandbox its program, and the saver answers, once it has saved, SAVED or
FAILED and a note for the call's result. FENCES is the directory of the workspace's runs' fences.

The upper layer is the quota's size rather than the room left, because deleting or replacing a
file frees room only when the saver applies it: a snippet rewriting a large file near the quota
must still work; the saver's exact count is what holds the quota.

Standard library only, and kept small: it runs under the system interpreter on every sandbox start,
before the snippet can, so each import and each line to compile is paid on run_code's latency and
CPU. libc is called through _ctypes, the C half of ctypes: ctypes itself costs a millisecond more.
"""

import os
import select
import stat
import sys
from _ctypes import FUNCFLAG_CDECL, FUNCFLAG_USE_ERRNO, RTLD_LOCAL, CFuncPtr, dlopen, get_errno

TYPE_CHECKING = False  # typing's, without the import of typing each sandbox start would pay
if TYPE_CHECKING:
    from types import ModuleType

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The overlay's own directories and the deletions (whiteouts) take inodes of the upper tmpfs too;
# the saver enforces the exact file cap.
INODE_ALLOWANCE = 1_000
PAGE = 4096
# The saver's answer on CHANNEL: one of these on a line, then the note for the call's result,
# within what the worker's end holds unread (it reads once the saver has ended).
SAVED, FAILED = "saved", "failed"
NOTE_CAP = 16_000
# What a refused step into the program cgroup says (sandbox.cgroups.REFUSED, which the sandbox
# reads).
REFUSED = "bwrap: cannot bound the snippet's memory: its cgroup refused the process"


# Setting the overlay up ------------------------------------------------------------------------


class _Function(CFuncPtr):
    """A libc function returning int, errno kept (what ctypes.CDLL(None, use_errno=True) makes)."""

    _flags_ = FUNCFLAG_CDECL | FUNCFLAG_USE_ERRNO


class _Libc:
    """What _ctypes looks a function up in (ctypes.CDLL is such an object): its dlopen handle."""

    # None: this process's own symbols, libc's among them (typeshed knows only a library's path).
    _handle = dlopen(None, RTLD_LOCAL)  # type: ignore[arg-type]


def _libc_call(name: str, *arguments: object) -> None:
    function = _Function((name, _Libc))  # type: ignore[arg-type]  # _Libc is CDLL enough
    if function(*arguments) != 0:
        code = get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


def _set_limits(limits: str) -> None:
    """Each RESOURCE=VALUE as hard and soft limit (prlimit64: a 64-bit rlimit on every ABI)."""
    for pair in filter(None, limits.split(",")):
        number, value = (int(part) for part in pair.split("="))
        both = value.to_bytes(8, sys.byteorder) * 2  # struct rlimit64 {cur, max}
        _libc_call("prlimit64", 0, number, both, None)


def _enter_cgroup(procs: str) -> None:
    """Move this process into a cgroup (sandbox.cgroups), failing closed as the sandbox expects."""
    try:
        handle = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(handle, str(os.getpid()).encode())
        finally:
            os.close(handle)
    except OSError:
        os.write(2, f"{REFUSED}\n".encode())
        os._exit(1)  # the saver, forked already, sees the sandbox end and saves nothing


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str) -> None:
    encoded = [value.encode() if value else None for value in (source, target, kind, data)]
    _libc_call("mount", encoded[0], encoded[1], encoded[2], flags, encoded[3])


def _enter_namespaces() -> None:
    """A user namespace mapping only our own ids, so the overlay's files stay ours on the host."""
    uid, gid = os.getuid(), os.getgid()
    _libc_call("unshare", _CLONE_NEWUSER | _CLONE_NEWNS)
    maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
    for name, text in maps:
        with open(f"/proc/self/{name}", "w") as map_file:
            map_file.write(text)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, "")


def _lay_overlay(path: str, workspace: int, limits: tuple[int, int]) -> int:
    """Stack a sized tmpfs and an overlay on path; return the tmpfs's upper directory."""
    mode = stat.S_IMODE(os.fstat(workspace).st_mode)
    max_bytes, max_files = limits
    size = max(max_bytes, PAGE)  # a tmpfs of size 0 would be unbounded
    inodes = max(max_files, 0) + INODE_ALLOWANCE
    _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size},nr_inodes={inodes}")
    scratch = os.open(path, _DIRECTORY)
    os.mkdir("upper", mode, dir_fd=scratch)
    os.mkdir("work", 0o700, dir_fd=scratch)
    layers = (
        f"lowerdir=/proc/self/fd/{workspace},upperdir=/proc/self/fd/{scratch}/upper,"
        f"workdir=/proc/self/fd/{scratch}/work,userxattr"
    )
    _mount("overlay", path, "overlay", _MS_NOSUID | _MS_NODEV, layers)
    upper = os.open("upper", _DIRECTORY, dir_fd=scratch)
    os.close(scratch)
    return upper


def _fork_saver(
    upper: int, workspace: int, limits: tuple[int, int], fences: str, channel: int
) -> None:
    """Leave a saver behind, waiting on this process, which becomes the sandbox by exec."""
    sandbox = os.pidfd_open(os.getpid())  # the parent's copy closes at the exec; the pid stays
    if os.fork() != 0:
        os.close(channel)  # the sandbox must not hold it: only the worker and the saver talk
        return
    code = 1
    try:
        os.setsid()  # out of the sandbox's process group, which is killed at the timeout
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the snippet's code comes on stdin: only the sandbox may hold it
        os.close(null)
        select.select([sandbox], [], [])
        # Most snippets change nothing: then the call need not wait for the saver to load.
        if not os.listdir(upper):
            _answer(channel, True, "")
        else:
            ticket = _ticket(channel)
            _answer(channel, *_saver().save_when_done(upper, workspace, limits, ticket, fences))
        code = 0
    except BaseException as error:  # the saver's failure is reported, never raised away
        os.write(2, f"[saving the program's files failed: {error}]\n".encode())
        note = f"Saving this program's files failed ({error}); some or all were not saved."
        _answer(channel, False, note)
    finally:
        os._exit(code)


def _ticket(channel: int) -> bytes:
    """What the worker said as it gave the sandbox its program; nothing if it gave none."""
    os.set_blocking(channel, False)
    try:
        return os.read(channel, 4096)
    except BlockingIOError:
        return b""


def _answer(channel: int, saved: bool, note: str) -> None:
    try:  # noqa: SIM105 (contextlib would be one more import on every sandbox start)
        os.write(channel, f"{SAVED if saved else FAILED}\n{note[:NOTE_CAP]}".encode())
    except OSError:
        pass  # the worker is gone: there is nobody to tell


def _saver() -> "ModuleType":
    """sandbox/overlay_save.py, loaded by the saver only (-I keeps this script's directory off
    sys.path)."""
    from importlib.util import module_from_spec, spec_from_file_location

    path = os.path.join(os.path.dirname(__file__), "overlay_save.py")
    spec = spec_from_file_location("overlay_save", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(argv: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """The positional arguments, the --name VALUE options, and the command after --."""
    separator = argv.index("--") if "--" in argv else len(argv)
    positional, options, words = [], {}, iter(argv[:separator])
    for word in words:
        if word in ("--budget", "--cgroup", "--limits"):
            options[word[2:]] = next(words, "")
        else:
            positional.append(word)
    return positional, options, argv[separator + 1 :]


USAGE = (
    "usage: overlay.py WORKSPACE MAX_BYTES MAX_FILES FENCES CHANNEL [--budget LIMITS] "
    "[--cgroup PROCS] [--limits LIMITS] -- COMMAND..."
)


def main(argv: list[str]) -> None:
    positional, options, command = _options(argv)
    if len(positional) != 5 or not command:
        raise SystemExit(USAGE)
    path, max_bytes, max_files, fences, channel = positional
    limits = (int(max_bytes), int(max_files))
    try:
        _set_limits(options.get("budget", ""))  # before the user namespace: see the docstring
        _enter_namespaces()
        # Opened inside the new mount namespace: the overlay takes no layer from another.
        workspace = os.open(path, _DIRECTORY)
        _fork_saver(_lay_overlay(path, workspace, limits), workspace, limits, fences, int(channel))
    except OSError as error:
        # The sandbox reports this the way bwrap reports its own failures.
        raise SystemExit(f"bwrap: cannot bound the workspace: {error.strerror}") from None
    if "cgroup" in options:
        _enter_cgroup(options["cgroup"])
    try:
        _set_limits(options.get("limits", ""))
    except OSError as error:
        raise SystemExit(f"bwrap: cannot set the snippet's limits: {error.strerror}") from None
    os.execv(command[0], command)  # noqa: S606 (the sandbox's argv, built by sandbox.bubblewrap)


if __name__ == "__main__":
    main(sys.argv[1:])
