"""What a finished snippet wrote, saved to its workspace within the quota; and a workspace's usage.

tools/overlay.py lays the overlay a snippet writes into and forks the saver, which loads this
module, waits for the sandbox to end, however it ends, and applies the overlay's upper layer to the
real workspace under the workspace's lock: deletions first, so the room they free counts, then new
and changed files, counted exactly. Once the workspace is at the quota each further file is refused
and keeps its earlier version, so a workspace ends at most one file (its file-size cap) past it.

Standard library only: it runs under the system interpreter, outside the project's virtualenv
(tools.quota imports it too, for `usage`).
"""

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import suppress

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "user.overlay.opaque"
# tmpfs allocates whole pages: less than this free means the snippet filled the upper layer.
FULL_MARGIN = 16 * 4096


# Plain classes rather than dataclasses: the saver loads this module once a snippet has ended,
# while the call waits.


class Usage:
    """What a workspace holds: the bytes of its regular files, and its entries of every kind."""

    def __init__(self, bytes: int = 0, files: int = 0) -> None:
        self.bytes, self.files = bytes, files

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Usage) and (self.bytes, self.files) == (other.bytes, other.files)

    def __repr__(self) -> str:
        return f"Usage(bytes={self.bytes}, files={self.files})"


class Saved:
    """What the saver did with a finished snippet's writes."""

    def __init__(self) -> None:
        self.skipped: list[str] = []
        self.full = False


class _Descriptor:
    """An open file descriptor, closed on leaving the with block."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __enter__(self) -> int:
        return self.handle

    def __exit__(self, *exception: object) -> None:
        os.close(self.handle)


# Measuring -------------------------------------------------------------------------------------


def usage(directory: int) -> Usage:
    """Count everything below an open directory, never following a symlink."""
    total = Usage()
    for _, info, child in _entries(directory):
        total.files += 1
        if stat.S_ISREG(info.st_mode):
            total.bytes += info.st_size
        elif child is not None:
            with _Descriptor(child):
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
        with _Descriptor(os.open(name, _DIRECTORY, dir_fd=directory)) as child:
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
        with _Descriptor(child):
            if target is not None and not stat.S_ISDIR(target.st_mode):
                _remove(workspace, name)
            elif target is not None:
                with _Descriptor(os.open(name, _DIRECTORY, dir_fd=workspace)) as below:
                    # An opaque directory hides everything the workspace had at its path.
                    if _is_opaque(child):
                        _empty(below)
                    else:
                        _remove_pass(child, below)


class _Budget:
    def __init__(self, used: Usage, max_bytes: int, max_files: int) -> None:
        self.used, self.max_bytes, self.max_files = used, max_bytes, max_files

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
            with _Descriptor(child):
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
    with _Descriptor(os.open(name, _DIRECTORY, dir_fd=workspace)) as below:
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
    temp = f".{name[:200]}.{os.urandom(8).hex()}.tmp"  # write_file's temp names, hidden alike
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
        _Descriptor(os.open(name, _FILE, dir_fd=upper)) as source,
        _Descriptor(os.open(temp, _CREATE, 0o600, dir_fd=workspace)) as copy,
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


def describe(used: Usage, max_bytes: int, max_files: int) -> str:
    """The quota and the usage, as every refusal states them (tools.quota's too)."""
    return (
        f"Your workspace quota is {max_bytes:,} bytes and {max_files:,} files and directories; "
        f"{used.bytes:,} bytes in {used.files:,} files and directories are used."
    )


def report(saved: Saved, used: Usage, max_bytes: int, max_files: int) -> str:
    """The note the saver leaves on the snippet's stderr when the quota stopped something."""
    lines = [
        f"[Workspace quota reached: writes past it failed. {describe(used, max_bytes, max_files)}]"
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


# The saver -------------------------------------------------------------------------------------


def _full(upper: int) -> bool:
    space = os.fstatvfs(upper)
    return space.f_bavail * space.f_frsize < FULL_MARGIN or space.f_favail == 0


def save_when_done(upper: int, workspace: int, limits: tuple[int, int]) -> None:
    """Save what the ended sandbox wrote, and say on its stderr what the quota refused."""
    saved = save(upper, workspace, *limits)
    saved.full = _full(upper)
    if saved.skipped or saved.full:
        os.write(2, report(saved, usage(workspace), *limits).encode())
