"""The rules a workspace path must meet, and the walks over a workspace that hold at any depth.

Every writer of a workspace (write_file, uploads, the saver of run_code's files) asks
`path_problem` before it stores a path, and every reader that measures or walks a whole workspace
(the quota, the Files panel, the export, account deletion, the saver) uses `walk` or
`remove_tree`: iterative, never following a symlink, with a bounded number of open descriptors,
so that no tree, however deep (one made before these rules, or one a snippet makes in its
sandbox), can exhaust the stack or the descriptor table of the process that walks it.

Names are stored in Unicode NFC (`normal_name`): "café.txt" typed as one code point or as "e"
and a combining accent is one file, not two that look alike. `usage` is what a workspace holds, as
its quota counts it (workspace.quota, and the saver).

Standard library only, and no Django: the saver (sandbox/overlay_save.py) loads this file by path,
under the system interpreter, without the project on sys.path.
"""

import os
import stat
import unicodedata
from collections.abc import Iterator

# 64 components and 1,024 characters hold any layout people and programs make (a Python package
# or node_modules tree is rarely 20 deep) while keeping every path far below PATH_MAX (4,096
# bytes) once it is placed under the workspaces directory, inside ZIP's and tar's limits for an
# export, and short enough to show in a listing or a refusal.
MAX_PATH_DEPTH = 64
MAX_PATH_CHARS = 1_024
NAME_MAX_BYTES = 255  # Linux's NAME_MAX, in bytes of the UTF-8 name

# Directories a walk keeps open at once below its root. Going up past them reopens a directory
# through "..", checked to be the very directory it left (device and inode); so a walk holds at
# most this many descriptors plus one, whatever the depth, well inside any RLIMIT_NOFILE.
OPEN_DIRECTORIES = 32

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Characters Windows' best-fit conversion turns into a path separator or a drive colon when a
# name reaches a program that is not Unicode-aware, beyond those NFKC already maps (the
# fullwidth full stop, solidus, reverse solidus and colon, U+FF0E, U+FF0F, U+FF3C, U+FF1A).
_BEST_FIT = str.maketrans(
    {
        "\u2044": "/",  # FRACTION SLASH
        "\u2215": "/",  # DIVISION SLASH
        "\u2216": "\\",  # SET MINUS
        "\u29f5": "\\",  # REVERSE SOLIDUS OPERATOR
        "\u2236": ":",  # RATIO
    }
)
_PATH_CHARACTERS = ("/", "\\", ":")


# Path rules ------------------------------------------------------------------------------------


def normal_name(text: str) -> str:
    """A name or path in the form it is stored under: NFC."""
    return unicodedata.normalize("NFC", text)


def stored_name(directory: int, name: str) -> str:
    """The name to use for name in the open directory: itself if an entry has it (one made
    before names were stored in NFC keeps its name), else its NFC form."""
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except OSError:
        return normal_name(name)
    return name


def compatibility_form(name: str) -> str:
    """What a name reads as once an NFKC-normalising or best-fit-converting program has it."""
    return unicodedata.normalize("NFKC", name).translate(_BEST_FIT)


def path_problem(relative: str) -> str | None:
    """Why a workspace-relative, '/'-separated path may not be stored, as a sentence a model or
    a person can act on; None when it may."""
    if "\x00" in relative:
        return "The path contains a NUL byte; use a plain name."
    names = relative.split("/")
    if len(names) > MAX_PATH_DEPTH:
        return (
            f"The path is {len(names):,} folders deep, over the {MAX_PATH_DEPTH} a workspace "
            "path may have: use fewer nested folders."
        )
    if len(relative) > MAX_PATH_CHARS:
        return (
            f"The path is {len(relative):,} characters long, over the {MAX_PATH_CHARS:,} a "
            "workspace path may have: use shorter names or fewer folders."
        )
    return next(filter(None, map(name_problem, names)), None)


def name_problem(name: str) -> str | None:
    """Why one component of a path may not be stored; None when it may."""
    if name in ("", ".", ".."):
        return f"The path has an empty, '.' or '..' component ({name!r}); name each folder."
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > NAME_MAX_BYTES:
        return (
            f"The name {name[:40]!r}... is {size:,} bytes long, over the {NAME_MAX_BYTES} bytes "
            "a name may have: shorten it."
        )
    if "\\" in name:
        return f"The name {name!r} contains a backslash; separate folders with '/'."
    compatible = compatibility_form(name)
    if compatible == name:
        return None
    if compatible in (".", "..") or any(
        compatible.count(char) > name.count(char) for char in _PATH_CHARACTERS
    ):
        return (
            f"The name {name!r} reads as {compatible!r} once its look-alike characters (such "
            "as fullwidth dots, slashes and colons) are converted, as Windows and archive tools "
            "do, which would change the path: rename it with plain characters."
        )
    return None


# Walking ---------------------------------------------------------------------------------------


class Entry:
    """One entry below the walked directory. `parent` is its directory, open while the entry is
    yielded (never to be closed by the caller); `relative` is its path from the walk's root."""

    __slots__ = ("depth", "info", "name", "parent", "relative")

    def __init__(
        self, relative: str, name: str, parent: int, info: os.stat_result, depth: int
    ) -> None:
        self.relative, self.name, self.parent = relative, name, parent
        self.info, self.depth = info, depth

    @property
    def is_directory(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)

    def __repr__(self) -> str:
        return f"Entry({self.relative!r})"


class _Frame:
    """A directory being walked: its names, how far through them, and its descriptor while it
    is among the OPEN_DIRECTORIES deepest (None once closed for room)."""

    __slots__ = ("entry", "handle", "identity", "names", "next")

    def __init__(self, entry: Entry | None, handle: int, names: list[str]) -> None:
        self.entry, self.handle, self.names, self.next = entry, handle, names, 0
        info = os.fstat(handle)
        self.identity = (info.st_dev, info.st_ino)


def walk(root: int, max_depth: int | None = None) -> Iterator[Entry]:
    """Every entry below the open directory root, each directory before what it holds (names in
    sorted order), never following a symlink; below max_depth levels, when given, a directory's
    contents are not visited. Entries that vanish mid-walk are passed over."""
    for entry, leaving in _visit(root, max_depth):
        if not leaving:
            yield entry


def remove_tree(name: str | os.PathLike[str], dir_fd: int | None = None) -> None:
    """Remove name (a path, or a name in the open directory dir_fd) and everything below it,
    following no symlink below it. It goes on past every failure and raises OSError only at the
    end, with the first failure and how many there were, so one stuck entry never keeps the
    rest."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    failures: list[OSError] = []
    try:
        directory = os.open(name, _DIRECTORY, dir_fd=dir_fd)
    except OSError as error:
        failures.append(error)
    else:
        try:
            failures += _empty(directory)
        finally:
            os.close(directory)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except OSError as error:
        failures.append(error)
    _raise_first(failures)


def empty(directory: int) -> None:
    """Remove everything below the open directory, as remove_tree does (and fails)."""
    _raise_first(_empty(directory))


def _empty(directory: int) -> list[OSError]:
    failures: list[OSError] = []
    for entry, leaving in _visit(directory, None, leave=True):
        try:
            if leaving:
                os.rmdir(entry.name, dir_fd=entry.parent)
            elif not entry.is_directory:
                os.unlink(entry.name, dir_fd=entry.parent)
        except FileNotFoundError:
            continue
        except OSError as error:
            failures.append(error)
    return failures


def _raise_first(failures: list[OSError]) -> None:
    if failures:
        first = failures[0]
        raise OSError(
            first.errno,
            f"{len(failures):,} entries could not be removed, the first: {first.strerror}",
        ) from first


def _visit(
    root: int, max_depth: int | None, *, leave: bool = False
) -> Iterator[tuple[Entry, bool]]:
    """The walk itself: (entry, False) on reaching each entry and, with leave, (directory,
    True) once everything below it has been visited, its parent open again."""
    frames = [_Frame(None, root, _names(root))]
    try:
        while frames:
            frame = frames[-1]
            if frame.handle < 0 and not _reopen(frames):
                continue
            if frame.next == len(frame.names):
                left = _pop(frames)
                if leave and left and frames and (frames[-1].handle >= 0 or _reopen(frames)):
                    parent = frames[-1].handle
                    yield Entry(left.relative, left.name, parent, left.info, left.depth), True
                continue
            entry = _next_entry(frame, len(frames))
            if entry is None:
                continue
            yield entry, False
            descend = entry.is_directory and (max_depth is None or entry.depth < max_depth)
            if descend and not _push(frames, entry) and leave:
                yield entry, True  # could not be opened: removing it will say why
    finally:
        for frame in frames[1:]:
            if frame.handle >= 0:
                os.close(frame.handle)


def _names(directory: int) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:  # unreadable: nothing below it can be visited
        return []


def _next_entry(frame: _Frame, depth: int) -> Entry | None:
    name = frame.names[frame.next]
    frame.next += 1
    try:
        info = os.stat(name, dir_fd=frame.handle, follow_symlinks=False)
    except FileNotFoundError:
        return None
    parent = frame.entry.relative + "/" if frame.entry else ""
    return Entry(parent + name, name, frame.handle, info, depth)


def _push(frames: list[_Frame], entry: Entry) -> bool:
    """Open the directory entry names and make it the one walked; False if it cannot be."""
    try:
        handle = os.open(entry.name, _DIRECTORY, dir_fd=entry.parent)
    except OSError:
        return False
    frames.append(_Frame(entry, handle, _names(handle)))
    if len(frames) > OPEN_DIRECTORIES + 1:  # the root is the caller's, never closed here
        oldest = frames[-OPEN_DIRECTORIES - 1]
        os.close(oldest.handle)
        oldest.handle = -1
    return True


def _pop(frames: list[_Frame]) -> Entry | None:
    """Leave the deepest directory; reopen its parent through '..' if it was closed for room."""
    left = frames.pop()
    if frames and frames[-1].handle < 0:
        parent = frames[-1]
        try:
            handle = os.open("..", _DIRECTORY, dir_fd=left.handle)
        except OSError:
            handle = -1
        if handle >= 0 and _identity(handle) != parent.identity:
            os.close(handle)  # moved meanwhile: _reopen finds it by its names, or gives it up
            handle = -1
        parent.handle = handle
    if frames:  # the root's frame is the caller's descriptor
        os.close(left.handle)
    return left.entry


def _reopen(frames: list[_Frame]) -> bool:
    """Reopen the deepest frame by its names from the nearest open ancestor, each step checked
    to be the directory walked before; give up (drop) what cannot be found again."""
    start = max(index for index, frame in enumerate(frames) if frame.handle >= 0)
    handle = frames[start].handle
    for index in range(start + 1, len(frames)):
        frame = frames[index]
        if frame.entry is None:  # never: only the root's frame has no entry, and it stays open
            raise ValueError("Only the root's frame has no entry.")
        try:
            child = os.open(frame.entry.name, _DIRECTORY, dir_fd=handle)
        except OSError:
            child = -1
        if handle != frames[start].handle:
            os.close(handle)
        if child >= 0 and _identity(child) != frame.identity:
            os.close(child)
            child = -1
        if child < 0:
            del frames[index:]
            return False
        handle = child
    frames[-1].handle = handle
    return True


def _identity(handle: int) -> tuple[int, int]:
    info = os.fstat(handle)
    return info.st_dev, info.st_ino


# Measuring -------------------------------------------------------------------------------------
# A plain class rather than a dataclass: the saver loads this module once a snippet has ended,
# while the call waits.


class Usage:
    """What a workspace holds: the bytes of its regular files, and its entries of every kind."""

    def __init__(self, bytes: int = 0, files: int = 0) -> None:
        self.bytes, self.files = bytes, files

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Usage) and (self.bytes, self.files) == (other.bytes, other.files)

    def __repr__(self) -> str:
        return f"Usage(bytes={self.bytes}, files={self.files})"


def usage(directory: int) -> Usage:
    """Count everything below an open directory, never following a symlink, at any depth."""
    total = Usage()
    for entry in walk(directory):
        total.files += 1
        if stat.S_ISREG(entry.info.st_mode):
            total.bytes += entry.info.st_size
    return total


def describe(used: Usage, max_bytes: int, max_files: int) -> str:
    """The quota and the usage, as every refusal states them (the saver's, and write_file's
    through workspace.quota)."""
    return (
        f"Your workspace quota is {max_bytes:,} bytes and {max_files:,} files and directories; "
        f"{used.bytes:,} bytes in {used.files:,} files and directories are used."
    )
