"""A snippet's writes, bounded by the kernel, then saved to its workspace within the quota.

Run by the sandbox as `python3 -I -S overlay.py WORKSPACE MAX_BYTES MAX_FILES -- COMMAND...`,
already as the unprivileged identity snippets run as. In a user and mount namespace of its own it
lays an overlay over the workspace whose upper layer is a tmpfs of the quota's size, so nothing a
snippet writes with its own syscalls reaches the disk while it runs, and more than a whole quota
fails at once with ENOSPC (no poll could stop a snippet writing 160 MiB in 0.09 s). It then forks
a saver into a session of its own (so killing the sandbox's process group at the timeout spares
it) and execs COMMAND, the sandbox. When the sandbox ends, however it ends, the saver applies the
upper layer (deletions first, then new and changed files) to the real workspace under the
workspace's lock, counting exactly, and refuses each file once the workspace is at the quota
(that file keeps its old version), so it ends at most one file past it. It holds the sandbox's
stdout and stderr until it is done, so the worker sees the call end only once its files are
saved.

The upper layer is the quota's size rather than the room left, because deleting or replacing a
file frees room only when the saver applies it: a snippet rewriting a large file near the quota
must still work.

Standard library only: it runs under the system interpreter, outside the project's virtualenv.
The Django side (settings, messages, write_file's check) is tools.quota.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import secrets
import select
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "user.overlay.opaque"
# The overlay's own directories and the deletions (whiteouts) take inodes of the upper tmpfs too;
# the saver enforces the exact file cap.
INODE_ALLOWANCE = 1_000
PAGE = 4096
# tmpfs allocates whole pages: less than this free means the snippet filled the upper layer.
FULL_MARGIN = 16 * PAGE


@dataclass
class Usage:
    """What a workspace holds: the bytes of its regular files, and its entries of every kind."""

    bytes: int = 0
    files: int = 0


@dataclass
class Saved:
    """What the saver did with a finished snippet's writes."""

    skipped: list[str] = field(default_factory=list)
    full: bool = False


# Measuring -------------------------------------------------------------------------------------


def usage(directory: int) -> Usage:
    """Count everything below an open directory, never following a symlink."""
    total = Usage()
    for _, info, child in _entries(directory):
        total.files += 1
        if stat.S_ISREG(info.st_mode):
            total.bytes += info.st_size
        elif child is not None:
            with _closing(child):
                below = usage(child)
            total.bytes += below.bytes
            total.files += below.files
    return total


def _entries(directory: int) -> Iterator[tuple[str, os.stat_result, int | None]]:
    """Each entry's name and lstat, with an open descriptor when it is a directory."""
    with os.scandir(directory) as listing:
        names = sorted(entry.name for entry in listing)  # the saver's order is the same each time
    for name in names:
        try:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            continue
        child = None
        if stat.S_ISDIR(info.st_mode):
            with suppress(OSError):
                child = os.open(name, _DIRECTORY, dir_fd=directory)
        yield name, info, child


@contextmanager
def _closing(handle: int) -> Iterator[int]:
    try:
        yield handle
    finally:
        os.close(handle)


# Saving the upper layer ------------------------------------------------------------------------


def save(upper: int, workspace: int, max_bytes: int, max_files: int) -> Saved:
    """Apply the snippet's changes (in upper) to the workspace, within the quota.

    Deletions go first so that the room they free counts; each file is written beside its target
    and renamed over it, so a file is always whole, old or new.
    """
    fcntl.flock(workspace, fcntl.LOCK_EX)
    try:
        _remove_pass(upper, workspace)
        budget = _Budget(usage(workspace), max_bytes, max_files)
        saved = Saved()
        _add_pass(upper, workspace, "", budget, saved)
        return saved
    finally:
        fcntl.flock(workspace, fcntl.LOCK_UN)


def _is_whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _is_opaque(directory: int) -> bool:
    try:
        return os.getxattr(directory, _OPAQUE) == b"y"
    except OSError:
        return False


def _target(directory: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove(directory: int, name: str) -> None:
    info = _target(directory, name)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        with _closing(os.open(name, _DIRECTORY, dir_fd=directory)) as child:
            _empty(child)
        os.rmdir(name, dir_fd=directory)
    else:
        os.unlink(name, dir_fd=directory)


def _empty(directory: int) -> None:
    with os.scandir(directory) as listing:
        names = [entry.name for entry in listing]
    for name in names:
        _remove(directory, name)


def _remove_pass(upper: int, workspace: int) -> None:
    """Delete what the snippet deleted, and whatever its new entries replace by a new kind."""
    for name, info, child in _entries(upper):
        target = _target(workspace, name)
        if child is None:
            if target is not None and (_is_whiteout(info) or stat.S_ISDIR(target.st_mode)):
                _remove(workspace, name)
            continue
        with _closing(child):
            if target is not None and not stat.S_ISDIR(target.st_mode):
                _remove(workspace, name)
            elif target is not None:
                with _closing(os.open(name, _DIRECTORY, dir_fd=workspace)) as below:
                    # An opaque directory hides everything the workspace had at its path.
                    if _is_opaque(child):
                        _empty(below)
                    else:
                        _remove_pass(child, below)


@dataclass
class _Budget:
    used: Usage
    max_bytes: int
    max_files: int

    def admits(self, size: int, replaced: os.stat_result | None) -> bool:
        """A file fits, or the workspace is still under the quota: the one file a snippet was
        writing when the upper layer filled is saved whole, so the workspace ends at most one
        file (its file-size cap) past the quota. The file count is exact."""
        old = replaced.st_size if replaced and stat.S_ISREG(replaced.st_mode) else 0
        files = self.used.files + (0 if replaced else 1)
        under = self.used.bytes < self.max_bytes
        return (under or self.used.bytes - old + size <= self.max_bytes) and files <= self.max_files

    def spend(self, size: int, replaced: os.stat_result | None) -> None:
        old = replaced.st_size if replaced and stat.S_ISREG(replaced.st_mode) else 0
        self.used.bytes += size - old
        self.used.files += 0 if replaced else 1


def _add_pass(upper: int, workspace: int, prefix: str, budget: _Budget, saved: Saved) -> None:
    for name, info, child in _entries(upper):
        shown = prefix + name
        if child is not None:
            with _closing(child):
                _add_directory(child, workspace, name, info, shown, budget, saved)
        elif not _is_whiteout(info) and not _add_entry(upper, workspace, name, info, budget):
            saved.skipped.append(shown)


def _add_directory(
    upper: int,
    workspace: int,
    name: str,
    info: os.stat_result,
    shown: str,
    budget: _Budget,
    saved: Saved,
) -> None:
    target = _target(workspace, name)
    if target is None:
        if not budget.admits(0, None):
            saved.skipped.append(shown + "/")
            return
        os.mkdir(name, 0o700, dir_fd=workspace)
        budget.spend(0, None)
    with _closing(os.open(name, _DIRECTORY, dir_fd=workspace)) as below:
        _add_pass(upper, below, shown + "/", budget, saved)
        # Never lock the owner out: the saver and the quota's count must always see inside.
        os.chmod(below, stat.S_IMODE(info.st_mode) | 0o700)
        os.utime(below, ns=(info.st_atime_ns, info.st_mtime_ns))


def _add_entry(
    upper: int, workspace: int, name: str, info: os.stat_result, budget: _Budget
) -> bool:
    """Write one file, symlink or FIFO of the snippet's into the workspace; False if refused."""
    replaced = _target(workspace, name)
    size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    if not budget.admits(size, replaced):
        return False
    temp = f".{name[:200]}.{secrets.token_hex(8)}.tmp"
    try:
        if stat.S_ISREG(info.st_mode):
            size = _copy(upper, name, workspace, temp, info)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=upper), temp, dir_fd=workspace)
        elif stat.S_ISFIFO(info.st_mode):
            os.mkfifo(temp, stat.S_IMODE(info.st_mode) | 0o600, dir_fd=workspace)
        else:
            return True  # sockets and devices mean nothing once the snippet is gone
        os.rename(temp, name, src_dir_fd=workspace, dst_dir_fd=workspace)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=workspace)
        raise
    budget.spend(size, replaced)
    return True


def _copy(upper: int, name: str, workspace: int, temp: str, info: os.stat_result) -> int:
    """Copy at most the size measured, so a file still growing cannot slip past the budget."""
    with (
        _closing(os.open(name, _FILE, dir_fd=upper)) as source,
        _closing(os.open(temp, _CREATE, 0o600, dir_fd=workspace)) as copy,
    ):
        copied = 0
        while copied < info.st_size:
            sent = os.sendfile(copy, source, copied, info.st_size - copied)
            if sent == 0:
                break
            copied += sent
        os.fchmod(copy, stat.S_IMODE(info.st_mode) | 0o600)
        os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
    return copied


def report(saved: Saved, used: Usage, max_bytes: int, max_files: int) -> str:
    """The note the saver leaves on the snippet's stderr when the quota stopped something."""
    if not saved.skipped and not saved.full:
        return ""
    lines = [
        f"[Workspace quota reached: writes past it failed. Your workspace quota is "
        f"{max_bytes:,} bytes and {max_files:,} files and directories; {used.bytes:,} bytes in "
        f"{used.files:,} files and directories are used.]"
    ]
    if saved.skipped:
        # A name with newlines could forge lines of the result: quote what is not printable.
        shown = ", ".join(name if name.isprintable() else repr(name) for name in saved.skipped[:10])
        more = f" and {len(saved.skipped) - 10:,} more" if len(saved.skipped) > 10 else ""
        lines.append(
            f"[Not saved, over the quota: {shown}{more}. Each keeps its earlier version, if it "
            "had one.]"
        )
    return "\n".join(lines) + "\n"


# Setting the overlay up ------------------------------------------------------------------------


def _libc_call(name: str, *arguments: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*arguments) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


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


def _full(upper: int) -> bool:
    space = os.fstatvfs(upper)
    return space.f_bavail * space.f_frsize < FULL_MARGIN or space.f_favail == 0


def _save_when_done(sandbox: int, upper: int, workspace: int, limits: tuple[int, int]) -> None:
    """The saver: wait for the sandbox to end, save its writes, say what the quota refused."""
    select.select([sandbox], [], [])
    saved = save(upper, workspace, *limits)
    saved.full = _full(upper)
    note = report(saved, usage(workspace), *limits)
    if note:
        os.write(2, note.encode())


def _fork_saver(upper: int, workspace: int, limits: tuple[int, int]) -> None:
    ready, told = os.pipe()
    if os.fork() == 0:
        code = 1
        try:
            os.close(ready)
            sandbox = os.pidfd_open(os.getppid())
            os.setsid()  # out of the sandbox's process group, which is killed at the timeout
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the snippet's code comes on stdin: only the sandbox may hold it
            os.close(null)
            os.write(told, b"1")
            os.close(told)
            _save_when_done(sandbox, upper, workspace, limits)
            code = 0
        except BaseException as error:  # the saver's failure is reported, never raised away
            with suppress(OSError):
                os.write(2, f"[saving the program's files failed: {error}]\n".encode())
        finally:
            os._exit(code)
    os.close(told)
    os.read(ready, 1)
    os.close(ready)


def main(argv: list[str]) -> None:
    path, max_bytes, max_files, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: overlay.py WORKSPACE MAX_BYTES MAX_FILES -- COMMAND...")
    limits = (int(max_bytes), int(max_files))
    try:
        _enter_namespaces()
        # Opened inside the new mount namespace: the overlay takes no layer from another.
        workspace = os.open(path, _DIRECTORY)
        upper = _lay_overlay(path, workspace, limits)
    except OSError as error:
        # The sandbox reports this the way bwrap reports its own failures.
        raise SystemExit(f"bwrap: cannot bound the workspace: {error}") from None
    _fork_saver(upper, workspace, limits)
    os.execv(command[0], command)  # noqa: S606 (the sandbox's argv, built by tools.sandbox)


if __name__ == "__main__":
    main(sys.argv[1:])
