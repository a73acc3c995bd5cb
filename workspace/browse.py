"""The workspace as its person sees it in the Files panel: list, open, download, delete, upload.

Confined exactly like the file tools (tools.files), by the same code (workspace.confined): every
path goes through the same rules (no '..', no absolute path, no NUL or control characters, and
workspace.paths' depth, length and compatibility rules), every directory is opened one component
at a time without following a symlink, and every write is admitted by the workspace quota under
the workspace's lock (workspace.quota). The panel shows and counts every entry a person has. The
messages here are for a person, not for the model.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO

from workspace import paths, versions
from workspace.confined import (
    DIRECTORY_FLAGS,
    READ_FLAGS,
    PathRefused,
    WorkspaceUnavailable,
    is_symlink,
    open_root,
    owner_of,
    path_components,
    temp_name,
)
from workspace.quota import Quota, admitted

# A page of more rows costs more to draw than to list: 10,000 files list in ~50 ms, 1,000 rows draw
# in ~150 (bench/files.py); the newest are what a person looks for, the rest are downloads away.
MAX_SHOWN_ENTRIES = 200
VIEW_MAX_BYTES = 200_000  # of a text file shown inline; the rest is for the download
CLASH_CHOICES = ("replace", "keep")
_UTF8_LONGEST = 4
NAME_MAX_BYTES = paths.NAME_MAX_BYTES
# An unnamed file in the workspace's filesystem: no listing, snippet or person can name it, and
# nothing is left of it if the process dies. It gets its name by linkat through /proc.
_UPLOAD_FLAGS = os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC
# Bidirectional controls reorder what a name looks like ("txt.exe" shown as "exe.txt").
_BIDI = {
    "\u061c",
    "\u200e",
    "\u200f",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
}
# Invisible characters that make "data\u200b.csv" look like "data.csv" (ZWJ and ZWNJ stay:
# emoji and some scripts need them).
_INVISIBLE = {"\u200b", "\u2060", "\ufeff"}


class BrowseError(Exception):
    """A request the panel refuses, with the sentence the person reads."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(BrowseError):
    """Nothing of that name in this person's workspace (another person's files included)."""

    status = 404


class Clash(BrowseError):
    """An upload whose name is taken, and no choice made between replacing and keeping both."""

    status = 409


class OverQuota(BrowseError):
    """An upload the workspace quota has no room for (the panel answers it as any refusal)."""


class FolderNotEmpty(BrowseError):
    """A folder to delete that holds entries: deleted only once the person confirms how many."""

    status = 409

    def __init__(self, message: str, path: str, contents: int) -> None:
        super().__init__(message)
        self.path, self.contents = path, contents


class Kind(StrEnum):
    """What an entry is: the code pages and code compare, apart from the words a person reads."""

    FILE = "file"
    FOLDER = "folder"
    SYMLINK = "symlink"
    FIFO = "fifo"
    SOCKET = "socket"
    DEVICE = "device"
    OTHER = "other"

    @classmethod
    def of(cls, mode: int) -> Kind:
        for test, kind in _KIND_TESTS:
            if test(mode):
                return kind
        return cls.OTHER

    @property
    def described(self) -> str:
        """The kind in a sentence: "x is a FIFO", "(a folder, with a name ...)"."""
        return _DESCRIBED[self]


_KIND_TESTS = (
    (stat.S_ISREG, Kind.FILE),
    (stat.S_ISDIR, Kind.FOLDER),
    (stat.S_ISLNK, Kind.SYMLINK),
    (stat.S_ISFIFO, Kind.FIFO),
    (stat.S_ISSOCK, Kind.SOCKET),
    (stat.S_ISCHR, Kind.DEVICE),
    (stat.S_ISBLK, Kind.DEVICE),
)
_DESCRIBED = {
    Kind.FILE: "a file",
    Kind.FOLDER: "a folder",
    Kind.SYMLINK: "a symlink",
    Kind.FIFO: "a FIFO",
    Kind.SOCKET: "a socket",
    Kind.DEVICE: "a device",
    Kind.OTHER: "not a regular file",
}


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # from the workspace root, '/'-separated
    size: int
    modified: datetime
    is_folder: bool
    kind: Kind  # in a sentence: kind.described
    # False for a name the panel refuses (not UTF-8, a control or bidi character, a path the
    # rules for storing refuse): it is shown escaped, and offered no link that would be refused.
    reachable: bool = True
    # Whether it can be deleted: a path only the rules for storing refuse (one made before them,
    # too deep or with a look-alike of '..') can, so that nothing stays that cannot be removed.
    removable: bool = True


@dataclass(frozen=True)
class Listing:
    folder: str  # "" for the root
    entries: list[Entry]
    total: int  # entries in the folder; only the newest MAX_SHOWN_ENTRIES are in `entries`

    @property
    def parents(self) -> list[tuple[str, str]]:
        """(name, path) of each folder from the root down to this one, for the breadcrumbs."""
        names = self.folder.split("/") if self.folder else []
        return [(name, "/".join(names[: depth + 1])) for depth, name in enumerate(names)]


@dataclass(frozen=True)
class TextPart:
    path: str
    text: str
    size: int
    shown_bytes: int

    @property
    def cut(self) -> bool:
        return self.shown_bytes < self.size


@dataclass
class Download:
    name: str
    size: int
    file: BinaryIO  # open on the very file checked; the caller closes it


# Paths -------------------------------------------------------------------------------------------


def components(path: str, *, existing: bool = False) -> list[str]:
    """The names along a path the person gave, by the file tools' rules, plus no bidi control
    (with existing, of an entry to remove: see workspace.confined.path_components)."""
    try:
        names = path_components(path, existing=existing)
    except PathRefused as refused:
        raise BrowseError(str(refused)) from None
    refuse_unshowable(path)
    return names


def refuse_unshowable(text: str) -> None:
    """Refuse what would make a name look like another: C1 controls, bidirectional marks and
    invisible characters."""
    bidi = next((char for char in text if char in _BIDI), None)
    if bidi is not None:
        raise BrowseError(
            f"The name {text!r} contains the bidirectional control U+{ord(bidi):04X}, which can "
            "make a name look like another. Rename the file without it."
        )
    invisible = next((char for char in text if char in _INVISIBLE), None)
    if invisible is not None:
        raise BrowseError(
            f"The name {text!r} contains the invisible character U+{ord(invisible):04X}, which "
            "makes a name look like another. Rename the file without it."
        )
    control = next((char for char in text if unicodedata.category(char) == "Cc"), None)
    if control is not None:
        raise BrowseError(f"The name {text!r} contains the control character {control!r}.")


def file_components(path: str, *, existing: bool = False) -> list[str]:
    names = components(path, existing=existing)
    if not names:
        raise BrowseError("That is your workspace itself, not a file: choose a file in it.")
    return names


def check_upload_name(name: str) -> str:
    """An uploaded file's name, refused unless it is one plain name under the same rules."""
    if not name:
        raise BrowseError("A file was sent without a name.")
    names = components(name)
    if len(names) != 1 or names[0] != name:
        raise BrowseError(
            f"The name {name!r} is a path: give the file a plain name, and choose the folder "
            "in the panel."
        )
    return name


def _shown(names: list[str]) -> str:
    return "/".join(names)


@contextmanager
def _workspace(workspace: Path) -> Iterator[tuple[ExitStack, int]]:
    with ExitStack() as stack:
        try:
            root = open_root(workspace, stack)
        except WorkspaceUnavailable as error:
            raise BrowseError(str(error)) from None
        try:
            yield stack, root
        except OSError as error:
            raise BrowseError(
                f"That did not work: {error.strerror or type(error).__name__}."
            ) from None


def _open_folder(root: int, names: list[str], stack: ExitStack) -> int:
    """Open the folder at names below root, one component at a time, following no symlink."""
    directory = root
    for depth, name in enumerate(names):
        shown = _shown(names[: depth + 1])
        try:
            child = os.open(name, DIRECTORY_FLAGS, dir_fd=directory)
        except OSError as error:
            raise _folder_error(error, directory, name, shown) from None
        stack.callback(os.close, child)
        directory = child
    return directory


def _folder_error(error: OSError, parent: int, name: str, shown: str) -> BrowseError:
    # With O_DIRECTORY, Linux reports a symlink as ENOTDIR rather than ELOOP.
    if error.errno in (errno.ELOOP, errno.ENOTDIR) and is_symlink(parent, name):
        return BrowseError(f"{shown} is a symlink, and the Files panel never follows one.")
    if error.errno == errno.ENOTDIR:
        return BrowseError(f"{shown} is a file, not a folder.")
    if error.errno == errno.ENOENT:
        return _gone(shown)
    return BrowseError(f"Could not open {shown}: {error.strerror}.")


def _gone(shown: str) -> NotFound:
    return NotFound(
        f"{shown} is not in your workspace (it may have been deleted or renamed since the list "
        "was shown)."
    )


# Listing -----------------------------------------------------------------------------------------


def list_folder(workspace: Path, folder: str = "") -> Listing:
    """The folder's entries, newest first: every one, as the quota counts every one."""
    names = components(folder)
    with _workspace(workspace) as (stack, root):
        directory = _open_folder(root, names, stack)
        found = [
            entry
            for name in os.listdir(directory)
            if (entry := _entry(directory, name, names)) is not None
        ]
    found.sort(key=lambda entry: (entry.modified, entry.name), reverse=True)
    return Listing(_shown(names), found[:MAX_SHOWN_ENTRIES], len(found))


def _entry(directory: int, name: str, names: list[str]) -> Entry | None:
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:  # deleted while listing
        return None
    path = _shown([*names, name])
    if not _reachable(path):
        modified = datetime.fromtimestamp(info.st_mtime, UTC)
        size = info.st_size if stat.S_ISREG(info.st_mode) else 0
        kind = Kind.of(info.st_mode)
        removable = _reachable(path, existing=True)
        shown = escaped_name(name)
        return Entry(
            shown, path if removable else "", size, modified, False, kind, False, removable
        )
    mode = info.st_mode
    kind = Kind.of(mode)
    modified = datetime.fromtimestamp(info.st_mtime, UTC)
    size = info.st_size if stat.S_ISREG(mode) else 0
    return Entry(name, _shown([*names, name]), size, modified, stat.S_ISDIR(mode), kind)


def _reachable(path: str, *, existing: bool = False) -> bool:
    """Whether the panel can name this entry: not a name run_code left that is not UTF-8 (a lone
    surrogate here, which no page can encode), nor a path the rules refuse (a control or bidi
    character, a backslash; without existing, a path too deep or a look-alike of '..')."""
    try:
        path.encode("utf-8")
        components(path, existing=existing)
    except (UnicodeEncodeError, BrowseError):
        return False
    return True


def escaped_name(name: str) -> str:
    """The name as it is, with what cannot be shown as itself written as an escape: '\\xff' for
    a byte that is not UTF-8, '\\u202e' for a bidi control, '\\n' for a newline."""
    return "".join(_escaped_char(char) for char in name)


def _escaped_char(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # os.listdir's stand-in for a byte that is not UTF-8
        return f"\\x{ord(char) - 0xDC00:02x}"
    if char.isprintable() and char not in _BIDI | _INVISIBLE:
        return char
    return char.encode("unicode_escape").decode("ascii")


# Opening -----------------------------------------------------------------------------------------


def _open_file(root: int, names: list[str], stack: ExitStack) -> tuple[int, os.stat_result]:
    """An open descriptor on the regular file at names, never through a symlink."""
    shown = _shown(names)
    directory = _open_folder(root, names[:-1], stack)
    try:
        handle = os.open(names[-1], READ_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        raise _gone(shown) from None
    except OSError as error:
        if error.errno == errno.ELOOP and is_symlink(directory, names[-1]):
            raise BrowseError(
                f"{shown} is a symlink, and the Files panel never follows one."
            ) from None
        raise
    stack.callback(os.close, handle)
    info = os.fstat(handle)
    if stat.S_ISDIR(info.st_mode):
        raise BrowseError(f"{shown} is a folder: open it from the list.")
    if not stat.S_ISREG(info.st_mode):
        raise BrowseError(
            f"{shown} is {Kind.of(info.st_mode).described}, not a file that can be opened."
        )
    if info.st_nlink > 1:
        # No writer of the workspace makes one (the saver copies a snippet's files): such a
        # name may be a hard link to a file outside it, which O_NOFOLLOW cannot tell.
        raise BrowseError(
            f"{shown} has other hard links, so it may be a file from outside your workspace: "
            "the Files panel does not open it."
        )
    return handle, info


def open_text(workspace: Path, path: str, limit: int = VIEW_MAX_BYTES) -> TextPart:
    """The start of a UTF-8 text file (at most `limit` bytes, cut at a character boundary)."""
    names = file_components(path)
    with _workspace(workspace) as (stack, root):
        handle, info = _open_file(root, names, stack)
        data = _read_at_most(handle, limit + 1)  # one byte more: was the file cut?
    part = data[:limit]
    text = _decode(part, cut=len(data) > limit, shown=_shown(names))
    return TextPart(_shown(names), text, max(info.st_size, len(data)), len(part))


def _read_at_most(handle: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    while limit > 0 and (chunk := os.read(handle, min(limit, 64 * 1024))):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def _decode(data: bytes, *, cut: bool, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        # A cut may split the last character; anything else is not text.
        split = error.start >= len(data) - _UTF8_LONGEST and "unexpected end" in error.reason
        if cut and split:
            return data[: error.start].decode("utf-8")
        raise BrowseError(
            f"{shown} is not UTF-8 text, so it cannot be shown here: download it."
        ) from None


def open_download(workspace: Path, path: str) -> Download:
    """The file, opened for reading: the caller streams it and closes it."""
    names = file_components(path)
    with _workspace(workspace) as (stack, root):
        handle, info = _open_file(root, names, stack)
        duplicate = os.dup(handle)
    return Download(names[-1], info.st_size, os.fdopen(duplicate, "rb"))


# Deleting ----------------------------------------------------------------------------------------


def delete(workspace: Path, path: str, contents: int | None = None) -> str:
    """Delete a file or a symlink (the link itself), or a folder: an empty one at once, one with
    entries in it only when `contents` is how many it holds now (the person was told, and
    confirmed), so that one click never deletes more than the person saw."""
    names = file_components(path, existing=True)
    shown = _shown(names)
    with _workspace(workspace) as (stack, root), admitted(root):
        directory = _open_folder(root, names[:-1], stack)
        try:
            info = os.stat(names[-1], dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            raise _gone(shown) from None
        if stat.S_ISDIR(info.st_mode):
            return _delete_folder(directory, names[-1], shown, contents)
        os.unlink(names[-1], dir_fd=directory)
    return f"Deleted {shown}."


def _delete_folder(directory: int, name: str, shown: str, contents: int | None) -> str:
    with suppress(OSError):
        os.rmdir(name, dir_fd=directory)
        return f"Deleted the empty folder {shown}."
    with ExitStack() as stack:
        held = len(list(paths.walk(_open_folder(directory, [name], stack))))
    if held == 0:
        raise BrowseError(f"Could not delete the folder {shown}.")
    entries = f"{held:,} {'entry' if held == 1 else 'entries'}"
    if contents != held:
        changed = "" if contents is None else f" (not {contents:,}: it changed since)"
        raise FolderNotEmpty(
            f"{shown} is a folder holding {entries}{changed}. Delete it with everything in it?",
            shown,
            held,
        )
    try:
        paths.remove_tree(name, dir_fd=directory)
    except OSError as error:
        raise BrowseError(f"{shown} was not deleted completely: {error.strerror}.") from None
    return f"Deleted the folder {shown} and the {entries} it held."


# Uploading ---------------------------------------------------------------------------------------


@dataclass
class Incoming:
    """An upload being written to an unnamed file (O_TMPFILE) in the workspace's filesystem: no
    snippet, listing or person can name it or count it, and it vanishes with its descriptor
    unless store_upload links it in."""

    root: int  # the workspace, open; owned by the caller
    handle: int | None
    written: int = 0
    finished: bool = False

    def write(self, data: bytes) -> None:
        if self.handle is None or self.finished:
            raise BrowseError("This upload was already finished.")
        view = memoryview(data)
        while view:
            view = view[os.write(self.handle, view) :]
        self.written += len(data)

    def finish(self) -> None:
        if self.handle is not None and not self.finished:
            versions.record(self.handle, self.written, [])  # so appends to it merge
            os.fsync(self.handle)
            self.finished = True

    def discard(self) -> None:
        """Close the file: unless it was linked in, nothing of it is left."""
        if self.handle is not None:
            os.close(self.handle)
            self.handle = None


def open_workspace(workspace: Path) -> int:
    """The workspace's root, open, for an upload that spans a request (the caller closes it)."""
    try:
        return os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise BrowseError("Your workspace is not available right now. Try again later.") from None


def begin_upload(root: int) -> Incoming:
    """An unnamed file for an upload, in the workspace's filesystem, until store_upload names it."""
    handle = os.open(".", _UPLOAD_FLAGS, 0o644, dir_fd=root)
    owner = owner_of(root)
    if owner is not None:
        os.fchown(handle, *owner)
    return Incoming(root, handle)


def room(root: int) -> tuple[int, int]:
    """The bytes and the files the workspace has room for now (a first check; store_upload
    checks again under the lock)."""
    with admitted(root) as budget:
        return (
            budget.quota.max_bytes - budget.used.bytes,
            budget.quota.max_files - budget.used.files,
        )


@dataclass(frozen=True)
class Stored:
    """An upload with its name: where it is (what the chat's attach names in the task, which
    may be "name (2).ext" on a clash) and the sentence the person reads."""

    path: str
    note: str


def store_upload(incoming: Incoming, folder: str, name: str, on_clash: str = "") -> Stored:
    """Give a complete upload its name in folder (in NFC, unless a file has the name as sent),
    under the workspace's lock and quota: the workspace with the upload must be within its quota
    (a run may have written meanwhile)."""
    names = components(folder)
    check_upload_name(name)
    if on_clash and on_clash not in CLASH_CHOICES:
        raise BrowseError(f"on_clash must be one of {', '.join(CLASH_CHOICES)}, not {on_clash!r}.")
    with ExitStack() as stack, admitted(incoming.root) as budget:
        directory = _open_folder(incoming.root, names, stack)
        stored = paths.stored_name(directory, name)
        problem = paths.path_problem(_shown([*names, stored]))
        if problem is not None:
            raise BrowseError(f"{name} was not stored: {problem}")
        target, replaced = _target(directory, stored, _shown([*names, stored]), on_clash)
        quota, used = budget.quota, budget.used
        after = used.bytes + incoming.written - (replaced or 0)
        if after > quota.max_bytes or used.files + (replaced is None) > quota.max_files:
            raise OverQuota(_over_quota(name, quota, used.bytes))
        _link(incoming, directory, target, name, replacing=replaced is not None)
    verb = "Uploaded" if replaced is None else "Replaced"
    path = _shown([*names, target])
    return Stored(path, f"{verb} {path} ({incoming.written:,} bytes).")


def _link(incoming: Incoming, directory: int, target: str, name: str, *, replacing: bool) -> None:
    """Name the upload: link the unnamed file in (beside the file it replaces, then over it).
    A failure (a kept copy's name too long, the disk full) is a refusal of this file alone."""
    if incoming.handle is None:
        raise BrowseError(f"{name} was not stored: the upload was already closed.")
    source = f"/proc/self/fd/{incoming.handle}"
    temp = temp_name(target) if replacing else target
    try:
        os.link(source, temp, dst_dir_fd=directory, follow_symlinks=True)
        if replacing:
            try:
                os.rename(temp, target, src_dir_fd=directory, dst_dir_fd=directory)
            except BaseException:
                with suppress(OSError):
                    os.unlink(temp, dir_fd=directory)
                raise
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise BrowseError(f"{name} was not stored: {reason}.") from None


def _over_quota(name: str, quota: Quota, used_bytes: int) -> str:
    return (
        f"{name} was not stored: it would take your workspace past its quota "
        f"({used_bytes:,} of {quota.max_bytes:,} bytes used, at most {quota.max_files:,} files). "
        "Delete files you no longer need and try again."
    )


def over_quota(name: str, root: int) -> str:
    """The refusal for an upload the quota has no room for, with what the workspace holds."""
    with admitted(root) as budget:
        return _over_quota(name, budget.quota, budget.used.bytes)


def _target(directory: int, name: str, shown: str, on_clash: str) -> tuple[str, int | None]:
    """The name to store under and the size of the file it replaces (None: a new file), by the
    person's choice on a clash."""
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return name, None
    if on_clash == "keep":
        return _free_name(directory, name), None
    if on_clash == "replace":
        if not stat.S_ISREG(info.st_mode):
            raise BrowseError(
                f"{shown} is {Kind.of(info.st_mode).described}, which an upload never replaces."
            )
        return name, info.st_size
    raise Clash(f"{shown} already exists: replace it, or keep both (the upload as a new name).")


def _free_name(directory: int, name: str) -> str:
    """'name (2).ext', 'name (3).ext'...: the first that is free."""
    stem, dot, extension = name.rpartition(".")
    if not stem:  # no extension, or a dotfile
        stem, dot, extension = name, "", ""
    for number in range(2, 10_000):
        candidate = f"{stem} ({number}){dot}{extension}"
        if len(candidate.encode("utf-8")) > NAME_MAX_BYTES:
            raise BrowseError(
                f"{name} was not stored: its name is too long for a copy beside it ({candidate!r} "
                f"would pass the {NAME_MAX_BYTES} bytes a name may have). Replace it, or rename "
                "the file and upload it again."
            )
        try:
            os.stat(candidate, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return candidate
    raise BrowseError(f"Too many copies of {name} already: rename some first.")
