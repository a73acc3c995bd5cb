"""What a finished snippet wrote, saved to its workspace within the quota; and a workspace's usage.

tools/overlay.py lays the overlay a snippet writes into and forks the saver, which loads this
module, waits for the sandbox to end, however it ends, and applies the overlay's upper layer to the
real workspace under the workspace's lock: deletions first, so the room they free counts, then new
and changed files, counted exactly. Once the workspace is at the quota each further file is refused
and keeps its earlier version, so a workspace ends at most one file (its file-size cap) past it.

Every walk here is iterative (tools/paths.py), so no tree, however deep, stops a save or a
measure; a path the workspace's rules refuse (tools.paths.path_problem: too deep, too long, a name
that becomes '..' or a separator under compatibility mapping) is not saved, and the note says so.

Standard library only: it runs under the system interpreter, outside the project's virtualenv
(tools.quota imports it too, for `usage`).
"""

import fcntl
import os
import stat
from collections.abc import Callable
from contextlib import suppress


def _load_paths():  # noqa: ANN202 (a module loaded from a path has no static type)
    """tools/paths.py: imported as usual in the project, loaded by path in the saver, which
    runs without the project on sys.path."""
    if __name__ == "tools.overlay_save":
        from tools import paths

        return paths
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("paths", os.path.join(os.path.dirname(__file__), "paths.py"))
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


paths = _load_paths()

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
        self.refused: list[tuple[str, str]] = []  # (path, why) refused by the path rules
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
    """Count everything below an open directory, never following a symlink, at any depth."""
    total = Usage()
    for entry in paths.walk(directory):
        total.files += 1
        if stat.S_ISREG(entry.info.st_mode):
            total.bytes += entry.info.st_size
    return total


class _Level:
    """A directory of the upper layer being applied, its counterpart in the workspace, and how
    far through its names the pass is. Both descriptors are the pass's, but for the first."""

    def __init__(
        self, upper: int, workspace: int, prefix: str, info: os.stat_result | None
    ) -> None:
        self.upper, self.workspace, self.prefix, self.info = upper, workspace, prefix, info
        with os.scandir(upper) as listing:
            self.names = sorted(entry.name for entry in listing)  # the same order each time
        self.next = 0


# What a pass does with one entry of the upper layer: returns the workspace directory (open, now
# the pass's) to apply the entry's contents to, or None to go no deeper.
_Visit = Callable[[_Level, str, os.stat_result], int | None]


def _apply(
    upper: int,
    workspace: int,
    visit: _Visit,
    leave: Callable[[_Level], None] = lambda level: None,
) -> None:
    """Run visit on every entry of upper, a directory's contents after it, and leave on each
    directory after its contents: iteratively, never deeper than a path may be, so that at most
    two descriptors per level are open."""
    levels = [_Level(upper, workspace, "", None)]
    try:
        while levels:
            level = levels[-1]
            if level.next == len(level.names):
                levels.pop()
                if levels:
                    try:
                        leave(level)
                    finally:
                        _close(level)
                continue
            name = level.names[level.next]
            level.next += 1
            info = _target(level.upper, name)
            if info is None:
                continue
            # One level past a path's depth, for the add pass to name what lies too deep.
            below = visit(level, name, info) if len(levels) <= paths.MAX_PATH_DEPTH + 1 else None
            if below is None:
                continue
            try:
                child = os.open(name, _DIRECTORY, dir_fd=level.upper)
                levels.append(_Level(child, below, f"{level.prefix}{name}/", info))
            except BaseException:
                os.close(below)
                raise
    finally:
        for level in levels[1:]:
            _close(level)


def _close(level: _Level) -> None:
    os.close(level.upper)
    os.close(level.workspace)


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
    paths.remove_tree(name, dir_fd=directory)


def _remove_pass(upper: int, workspace: int) -> None:
    """Delete what the snippet deleted, and whatever its new entries replace by a new kind.

    Whiteouts more than a path's depth down (in a tree made before paths were capped) are not
    applied; the add pass names what lies there as not saved."""

    def visit(level: _Level, name: str, info: os.stat_result) -> int | None:
        target = _target(level.workspace, name)
        if target is None:
            return None
        if not stat.S_ISDIR(info.st_mode):
            if _is_whiteout(info) or stat.S_ISDIR(target.st_mode):
                _remove(level.workspace, name)
            return None
        if not stat.S_ISDIR(target.st_mode):
            _remove(level.workspace, name)
            return None
        below = os.open(name, _DIRECTORY, dir_fd=level.workspace)
        with _Descriptor(os.open(name, _DIRECTORY, dir_fd=level.upper)) as child:
            opaque = _is_opaque(child)
        if opaque:  # it hides everything the workspace had at its path
            with _Descriptor(below):
                paths.empty(below)
            return None
        return below

    _apply(upper, workspace, visit)


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
    """Write the snippet's new and changed entries into the workspace, within the budget and the
    path rules; a new name is stored in NFC (an existing entry keeps its own)."""

    def visit(level: _Level, name: str, info: os.stat_result) -> int | None:
        directory = stat.S_ISDIR(info.st_mode)
        if _is_whiteout(info):
            return None
        stored = paths.stored_name(level.workspace, name)
        shown = prefix + level.prefix + stored
        problem = paths.path_problem(shown)
        if problem is not None:
            saved.refused.append((shown + "/" * directory, problem))
            return None
        if directory:
            return _add_directory(level.workspace, stored, shown, budget, saved)
        if not _add_entry(level.upper, level.workspace, name, stored, info, budget):
            saved.skipped.append(shown)
        return None

    def leave(level: _Level) -> None:
        # Never lock the owner out: the saver and the quota's count must always see inside.
        os.chmod(level.workspace, stat.S_IMODE(level.info.st_mode) | 0o700)
        os.utime(level.workspace, ns=(level.info.st_atime_ns, level.info.st_mtime_ns))

    _apply(upper, workspace, visit, leave)


def _add_directory(
    workspace: int, name: str, shown: str, budget: _Budget, saved: Saved
) -> int | None:
    """The workspace's directory name, made if it is new and the budget admits it, open."""
    if _target(workspace, name) is None:
        if not budget.admits(0, None):
            saved.skipped.append(shown + "/")
            return None
        os.mkdir(name, 0o700, dir_fd=workspace)
        budget.spend(0, None)
    return os.open(name, _DIRECTORY, dir_fd=workspace)


def _add_entry(
    upper: int, workspace: int, name: str, stored: str, info: os.stat_result, budget: _Budget
) -> bool:
    """Write one file, symlink or FIFO of the snippet's (name in upper) into the workspace as
    stored; False if refused.

    Its temporary name is write_file's kind; it exists only under the workspace's lock, and a
    name of the person's that happened to match it is never replaced (O_EXCL) nor removed."""
    replaced = _target(workspace, stored)
    size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    if not budget.admits(size, replaced):
        return False
    temp = f".{stored[:200]}.{os.urandom(8).hex()}.tmp"
    try:
        if stat.S_ISREG(info.st_mode):
            size = _copy(upper, name, workspace, temp, info)
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=upper), temp, dir_fd=workspace)
        elif stat.S_ISFIFO(info.st_mode):
            os.mkfifo(temp, stat.S_IMODE(info.st_mode) | 0o600, dir_fd=workspace)
        else:
            return True  # sockets and devices mean nothing once the snippet is gone
        os.rename(temp, stored, src_dir_fd=workspace, dst_dir_fd=workspace)
    except FileExistsError:
        raise  # the temporary name was taken, by nothing of this save's
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


def refused_note(saved: Saved) -> str:
    """The note the saver leaves on the snippet's stderr for what the path rules refused."""
    lines = [
        f"[Not saved, {path if path.isprintable() else repr(path)}: {why}]"
        for path, why in saved.refused[:10]
    ]
    if len(saved.refused) > 10:
        lines.append(f"[And {len(saved.refused) - 10:,} more paths not saved.]")
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
    if saved.refused:
        os.write(2, refused_note(saved).encode())
