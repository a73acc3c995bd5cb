"""What a finished snippet wrote, saved to its workspace within the quota.

sandbox/overlay.py lays the overlay a snippet writes into and forks the saver, which loads this
module, waits for the sandbox to end, however it ends, and applies the overlay's upper layer to the
real workspace under the workspace's lock: deletions first, so the room they free counts, then new
and changed files, counted exactly. Once the workspace is at the quota each further file is refused
and keeps its earlier version, so a workspace ends at most one file (its file-size cap) past it.

Every walk here is iterative (workspace/paths.py), so no tree, however deep, stops a save or a
measure; a path the workspace's rules refuse (workspace.paths.path_problem: too deep, too long, a
name that becomes '..' or a separator under compatibility mapping) is not saved, and the note says
so.

Standard library only: it runs under the system interpreter, outside the project's virtualenv,
and loads workspace/paths.py (the path rules, the walks, a workspace's usage) by path.
"""

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress

TYPE_CHECKING = False  # typing's, without the import of typing each save would pay
if TYPE_CHECKING:
    from types import ModuleType


def _load(name: str) -> "ModuleType":
    """workspace/NAME.py: imported as usual in the project, loaded by path in the saver, which
    runs without the project on sys.path (sandbox/overlay.py runs it by its path)."""
    if __name__ == "sandbox.overlay_save":
        from importlib import import_module

        return import_module(f"workspace.{name}")
    from importlib.util import module_from_spec, spec_from_file_location

    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(project, "workspace", f"{name}.py")
    spec = spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from workspace import paths, versions
else:
    paths = _load("paths")
    versions = _load("versions")

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OPAQUE = "user.overlay.opaque"
# tmpfs allocates whole pages: less than this free means the snippet filled the upper layer.
FULL_MARGIN = 16 * 4096


# Plain classes rather than dataclasses: the saver loads this module once a snippet has ended,
# while the call waits.


class Saved:
    """What the saver did with a finished snippet's writes."""

    def __init__(self) -> None:
        self.skipped: list[str] = []
        self.refused: list[tuple[str, str]] = []  # (path, why) refused by the path rules
        self.full = False
        self.superseded_by = 0  # the attempt that took its run over: nothing was saved
        self.aside: list[tuple[str, str]] = []  # (a path another call changed, ours's new name)
        self.kept: list[str] = []  # deletions not made: another call changed those entries
        self.appended: list[str] = []  # appended to after another call's appends to them
        self.failure = ""  # why saving stopped part way
        self.unsaved: list[str] = []  # what that left unsaved


class Ticket:
    """What the worker said as it gave the sandbox its program: the run (0: none) and attempt it
    runs for, and the moment it started (a file change time, in nanoseconds)."""

    def __init__(self, run: int, attempt: int, moment: int) -> None:
        self.run, self.attempt, self.moment = run, attempt, moment

    def text(self) -> bytes:
        """As the worker sends it (sandbox/fence.py)."""
        return f"{self.run} {self.attempt} {self.moment}\n".encode()

    @classmethod
    def parse(cls, text: bytes) -> "Ticket | None":
        fields = text.decode("ascii", errors="replace").split()
        if len(fields) != 3 or not all(field.isdigit() for field in fields):
            return None
        return cls(*map(int, fields))


class _Descriptor:
    """An open file descriptor, closed on leaving the with block."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __enter__(self) -> int:
        return self.handle

    def __exit__(self, *exception: object) -> None:
        os.close(self.handle)


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


def save(
    upper: int,
    workspace: int,
    max_bytes: int,
    max_files: int,
    ticket: Ticket | None = None,
    fences: int | None = None,
) -> Saved:
    """Apply the snippet's changes (in upper) to the workspace, within the quota.

    With a ticket, nothing is applied if the run was claimed again since (its fence, in the open
    directory `fences`, is past the ticket's attempt), and the changes that clash with another
    call's are set aside first, but for files both only appended to: there what the snippet added
    is saved after what the other call added. Deletions go first so that the room they free
    counts; each file is written beside its target and renamed over it, so a file is always whole,
    old or new.
    """
    saved = Saved()
    appends: dict[str, int] = {}  # a path the snippet only appended to: where its new bytes start
    fcntl.flock(workspace, fcntl.LOCK_EX)
    try:
        if ticket is not None:
            fence = _fence(fences, ticket.run)
            if fence > ticket.attempt:
                saved.superseded_by = fence
                return saved
            _set_aside(upper, workspace, ticket, saved, appends)
        _remove_pass(upper, workspace)
        budget = _Budget(paths.usage(workspace), max_bytes, max_files)
        _add_pass(upper, workspace, budget, saved, appends)
    except OSError as error:  # the disk is full, say: what is in place stays, the rest is named
        saved.failure = error.strerror or str(error)
        saved.unsaved = _unsaved(upper, workspace, saved.appended)
    finally:
        fcntl.flock(workspace, fcntl.LOCK_UN)
    return saved


def _fence(fences: int | None, run: int) -> int:
    """The attempt the run is worked at now, by its fence (sandbox/fence.py); 0: it has none."""
    if fences is None or run == 0:
        return 0
    try:
        handle = os.open(str(run), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fences)
    except FileNotFoundError:
        return 0
    with _Descriptor(handle):
        return int(os.read(handle, 64))


# Changes that clash with another call's ----------------------------------------------------------
# Each walk here holds a descriptor per level it is in (the saver's own, gone when it exits), never
# recurses, and goes no deeper than a saved path may (workspace/paths.py), as the passes do.


def _names(directory: int) -> Iterator[str]:
    return iter(sorted(os.listdir(directory)))  # the saver's order is the same each time


def _set_aside(
    upper: int, workspace: int, ticket: Ticket, saved: Saved, appends: dict[str, int]
) -> None:
    """Set aside each of the snippet's changes to an entry that another call changed since the
    snippet started (its change time, which a snippet cannot set, is that late): the other call's
    version stays, the snippet's is saved beside it under a new name, and a deletion of it is not
    made. Directories both sides have are merged, so only what is inside them can clash; a file
    both sides only appended to is no clash either: where the snippet's new bytes start goes in
    `appends`, for the add pass to save them after the other call's."""
    levels = [(upper, workspace, "", _names(upper))]
    try:
        while levels:
            above, below, prefix, names = levels[-1]
            name = next(names, None)
            if name is None:
                levels.pop()
                _close_level(above, below, upper)
                continue
            info, target = _target(above, name), _target(below, name)
            if info is None or target is None:
                continue
            deeper = len(levels) <= paths.MAX_PATH_DEPTH
            if deeper and stat.S_ISDIR(info.st_mode) and stat.S_ISDIR(target.st_mode):
                child = os.open(name, _DIRECTORY, dir_fd=above)
                if not _is_opaque(child):  # not a directory made anew in its place: merged
                    mirror = os.open(name, _DIRECTORY, dir_fd=below)
                    levels.append((child, mirror, f"{prefix}{name}/", _names(child)))
                    continue
                os.close(child)
            if not _changed_since(below, name, target, ticket.moment):
                continue
            start = _appended_from(above, below, name, info, target)
            if start is None:
                _keep_both(above, below, name, prefix, ticket.run, saved)
            else:
                appends[prefix + name] = start
    finally:
        for above, below, _, _ in levels:
            _close_level(above, below, upper)


def _close_level(above: int, below: int, upper: int) -> None:
    if above != upper:  # the walk's own descriptors, not its caller's
        os.close(above)
        os.close(below)


def _changed_since(directory: int, name: str, info: os.stat_result, moment: int) -> bool:
    """Whether an entry, or anything below it, changed at or after `moment`."""
    if info.st_ctime_ns >= moment:
        return True
    if not stat.S_ISDIR(info.st_mode):
        return False
    with _Descriptor(os.open(name, _DIRECTORY, dir_fd=directory)) as below:
        return any(entry.st_ctime_ns >= moment for entry in _below(below))


def _appended_from(
    above: int, below: int, name: str, info: os.stat_result, target: os.stat_result
) -> int | None:
    """Where the snippet's new bytes start, if both sides only appended to the version of a file
    the snippet's copy started from (workspace/versions.py): its copy and the workspace's version
    both start with that version, whole. None if either rewrote, cut or changed its bytes."""
    if not (stat.S_ISREG(info.st_mode) and stat.S_ISREG(target.st_mode)):
        return None
    with (
        _Descriptor(os.open(name, _FILE, dir_fd=above)) as ours,
        _Descriptor(os.open(name, _FILE, dir_fd=below)) as theirs,
    ):
        started = versions.versions(ours)[:1]  # the overlay copied the version's record with it
        size = dict(versions.versions(theirs)).get(started[0][0]) if started else None
        if size is None or not versions.start_alike(ours, theirs, size):
            return None
        return size


def _below(directory: int) -> Iterator[os.stat_result]:
    """The lstat of every entry below an open directory, at any depth."""
    return (entry.info for entry in paths.walk(directory))


def _keep_both(above: int, below: int, name: str, prefix: str, run: int, saved: Saved) -> None:
    info = _target(above, name)
    if info is not None and _is_whiteout(info):
        os.unlink(name, dir_fd=above)  # the other call's version stays
        saved.kept.append(prefix + name)
        return
    aside = _aside_name(above, below, name, run)
    os.rename(name, aside, src_dir_fd=above, dst_dir_fd=above)
    saved.aside.append((prefix + name, prefix + aside))


def _aside_name(above: int, below: int, name: str, run: int) -> str:
    """`notes (conflict from run 12).txt`, numbered if taken, within a name's 255 bytes."""
    stem, extension = os.path.splitext(name)
    if len(extension) > 16:
        stem, extension = name, ""
    label = f"conflict from run {run}" if run else "conflict"
    for number in range(1, 1000):
        suffix = f" ({label})" if number == 1 else f" ({label}, {number})"
        room = 255 - len((suffix + extension).encode())
        shortened = stem.encode()[:room].decode(errors="ignore")
        candidate = shortened + suffix + extension
        if _target(above, candidate) is None and _target(below, candidate) is None:
            return candidate
    raise OSError(errno.EEXIST, f"no free name to keep {name!r} beside")


def _unsaved(upper: int, workspace: int, appended: list[str]) -> list[str]:
    """What of the snippet's changes is not in the workspace: after a save that failed (a file
    appended to after another call's appends is in place whatever its size)."""
    missing: list[str] = []
    levels: list[tuple[int, int | None, str, Iterator[str]]] = [
        (upper, workspace, "", _names(upper))
    ]
    try:
        while levels:
            above, below, prefix, names = levels[-1]
            name = next(names, None)
            if name is None:
                levels.pop()
                _close_walked(above, below, upper)
                continue
            info = _target(above, name)
            target = None if below is None else _target(below, name)
            if info is None:
                continue
            if stat.S_ISDIR(info.st_mode) and len(levels) <= paths.MAX_PATH_DEPTH:
                mirror = None
                if target is not None and stat.S_ISDIR(target.st_mode):
                    mirror = os.open(name, _DIRECTORY, dir_fd=below)
                else:
                    missing.append(f"{prefix}{name}/")
                child = os.open(name, _DIRECTORY, dir_fd=above)
                levels.append((child, mirror, f"{prefix}{name}/", _names(child)))
            elif prefix + name not in appended and not _in_place(above, below, name, info, target):
                missing.append(prefix + name)
    finally:
        for above, below, _, _ in levels:
            _close_walked(above, below, upper)
    return missing


def _close_walked(above: int, below: int | None, upper: int) -> None:
    if above != upper:
        os.close(above)
        if below is not None:
            os.close(below)


def _in_place(
    above: int, below: int | None, name: str, info: os.stat_result, target: os.stat_result | None
) -> bool:
    """Whether the workspace has the snippet's version of one entry (or, for a deletion, none)."""
    if _is_whiteout(info):
        return target is None
    if target is None or stat.S_IFMT(target.st_mode) != stat.S_IFMT(info.st_mode):
        return False
    if stat.S_ISREG(info.st_mode):  # a saved copy keeps the size and modification time
        return (target.st_size, target.st_mtime_ns) == (info.st_size, info.st_mtime_ns)
    if stat.S_ISLNK(info.st_mode):
        return os.readlink(name, dir_fd=above) == os.readlink(name, dir_fd=below)
    return True


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
    def __init__(self, used: paths.Usage, max_bytes: int, max_files: int) -> None:
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


def _add_pass(
    upper: int, workspace: int, budget: _Budget, saved: Saved, appends: dict[str, int]
) -> None:
    """Write the snippet's new and changed entries into the workspace, within the budget and the
    path rules; a new name is stored in NFC (an existing entry keeps its own). A file in
    `appends` is the workspace's version followed by what the snippet added to it."""

    def visit(level: _Level, name: str, info: os.stat_result) -> int | None:
        directory = stat.S_ISDIR(info.st_mode)
        if _is_whiteout(info):
            return None
        stored = paths.stored_name(level.workspace, name)
        shown = level.prefix + stored
        problem = paths.path_problem(shown)
        if problem is not None:
            saved.refused.append((shown + "/" * directory, problem))
            return None
        if directory:
            return _add_directory(level.workspace, stored, shown, budget, saved)
        start = appends.get(level.prefix + name)
        if not _add_entry(level.upper, level.workspace, name, stored, info, budget, start):
            saved.skipped.append(shown)
        elif start is not None:
            saved.appended.append(level.prefix + name)
        return None

    def leave(level: _Level) -> None:
        if level.info is None:  # the top, which is never left
            return
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
    upper: int,
    workspace: int,
    name: str,
    stored: str,
    info: os.stat_result,
    budget: _Budget,
    start: int | None,
) -> bool:
    """Write one file, symlink or FIFO of the snippet's (name in upper) into the workspace as
    stored, or, from `start` on, after the workspace's version of a file; False if refused.

    Its temporary name is write_file's kind; it exists only under the workspace's lock, and a
    name of the person's that happened to match it is never replaced (O_EXCL) nor removed."""
    replaced = _target(workspace, stored)
    size = info.st_size if stat.S_ISREG(info.st_mode) else 0
    if start is not None:
        if replaced is None:
            raise _gone(stored)
        size += replaced.st_size - start
    if not budget.admits(size, replaced):
        return False
    temp = f".{stored[:200]}.{os.urandom(8).hex()}.tmp"
    try:
        if stat.S_ISREG(info.st_mode):
            size = _copy(upper, name, workspace, stored, temp, info, start)
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


def _copy(
    upper: int,
    name: str,
    workspace: int,
    stored: str,
    temp: str,
    info: os.stat_result,
    start: int | None,
) -> int:
    """Copy at most the size measured, so a file still growing cannot slip past the budget: the
    snippet's file, or the workspace's version followed by the snippet's from `start` on. The
    copy records the versions it starts with (workspace/versions.py): the one it replaces, and
    those, if it starts with that one whole."""
    with (
        _Descriptor(os.open(name, _FILE, dir_fd=upper)) as source,
        _Descriptor(os.open(temp, _CREATE, 0o600, dir_fd=workspace)) as copy,
        _Replaced(workspace, stored) as replaced,
    ):
        kept: list[versions.Version] = []  # the versions the copy starts with
        if start is None:
            copied = _send(copy, source, 0, info.st_size)
            if replaced is not None and _starts_with(source, replaced, copied):
                kept = versions.versions(replaced)
        else:
            if replaced is None:
                raise _gone(stored)
            copied = _send(copy, replaced, 0, os.fstat(replaced).st_size)
            copied += _send(copy, source, start, info.st_size - start)
            kept = versions.versions(replaced)
        versions.record(copy, copied, kept)
        os.fchmod(copy, stat.S_IMODE(info.st_mode) | 0o600)
        os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
    return copied


def _starts_with(copied: int, replaced: int, size: int) -> bool:
    """Whether the snippet's file, `size` bytes of it copied, starts with the whole of the file it
    replaces."""
    old = os.fstat(replaced).st_size
    return old <= size and versions.start_alike(copied, replaced, old)


def _gone(name: str) -> FileNotFoundError:
    """The workspace's version of a file the snippet appended to (the add pass found it) is not
    there."""
    return FileNotFoundError(errno.ENOENT, "the file appended to is gone", name)


def _send(copy: int, source: int, offset: int, count: int) -> int:
    """Append `count` bytes of source from `offset` to copy; fewer if source is shorter."""
    sent = 0
    while sent < count:
        chunk = os.sendfile(copy, source, offset + sent, count - sent)
        if chunk == 0:
            break
        sent += chunk
    return sent


class _Replaced:
    """The regular file a copy replaces, open for reading (None if there is none)."""

    def __init__(self, workspace: int, name: str) -> None:
        self.workspace, self.name = workspace, name
        self.handle: int | None = None

    def __enter__(self) -> int | None:
        target = _target(self.workspace, self.name)
        if target is not None and stat.S_ISREG(target.st_mode):
            self.handle = os.open(self.name, _FILE, dir_fd=self.workspace)
        return self.handle

    def __exit__(self, *exception: object) -> None:
        if self.handle is not None:
            os.close(self.handle)


def _listed(names: list[str]) -> str:
    """At most ten names; a name with newlines could forge lines of the result, so what is not
    printable is quoted."""
    shown = ", ".join(name if name.isprintable() else repr(name) for name in names[:10])
    return shown + (f" and {len(names) - 10:,} more" if len(names) > 10 else "")


def report(saved: Saved, used: paths.Usage, max_bytes: int, max_files: int) -> str:
    """The note the saver leaves on the snippet's stderr when the quota stopped something."""
    quota = paths.describe(used, max_bytes, max_files)
    lines = [f"[Workspace quota reached: writes past it failed. {quota}]"]
    if saved.skipped:
        lines.append(
            f"[Not saved, over the quota: {_listed(saved.skipped)}. Each keeps its earlier "
            "version, if it had one.]"
        )
    return "\n".join(lines) + "\n"


def outcome(saved: Saved) -> tuple[bool, str]:
    """Whether the snippet's files were saved, and what its call's result says about them."""
    if saved.superseded_by:
        return False, (
            f"Not saved: while this program ran, its run was taken over (it is now at attempt "
            f"{saved.superseded_by}), so nothing it wrote was saved."
        )
    notes = []
    if saved.failure:
        unsaved = _listed(saved.unsaved) if saved.unsaved else "nothing, as far as Loop can tell"
        notes.append(
            f"Saving this program's files failed ({saved.failure}). Not saved: {unsaved}. "
            "Everything else it wrote was saved."
        )
    if saved.aside:
        moved = [
            f"{theirs} (this program's version is saved as {ours})" for theirs, ours in saved.aside
        ]
        notes.append(
            "Changed by another call while this program ran, so kept as that call left them: "
            f"{_listed(moved)}. Merge the two versions if both matter."
        )
    if saved.appended:
        notes.append(
            "Appended to by another call while this program ran, as this program appended to "
            "them, so what this program added was saved after what that call added: "
            f"{_listed(saved.appended)}."
        )
    if saved.kept:
        notes.append(
            "Not deleted, because another call changed them while this program ran: "
            f"{_listed(saved.kept)}."
        )
    return not saved.failure, "\n".join(notes)


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


def _fences(path: str) -> int | None:
    try:  # a path only: the saver may look fences up by name (0711), not list them
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # no run of this workspace's was ever claimed by a worker
        return None


NO_TICKET = "Not saved: the sandbox ran without being told what for, so nothing it wrote was saved."


def save_when_done(
    upper: int, workspace: int, limits: tuple[int, int], given: bytes, fences: str
) -> tuple[bool, str]:
    """Save what the ended sandbox wrote, say on its stderr what the quota refused, and say
    whether it was saved, and what the call's result should tell about it."""
    ticket = Ticket.parse(given)
    if ticket is None:  # the worker gives one with every program: this sandbox ran none of it
        return False, NO_TICKET
    saved = save(upper, workspace, *limits, ticket, _fences(fences))
    if saved.superseded_by:
        os.write(2, b"[Not saved: the run was taken over while this program ran.]\n")
        return outcome(saved)
    saved.full = _full(upper)
    if saved.skipped or saved.full:
        os.write(2, report(saved, paths.usage(workspace), *limits).encode())
    if saved.refused:
        os.write(2, refused_note(saved).encode())
    return outcome(saved)
