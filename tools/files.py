"""Workspace-confined file tools (read_file, write_file, list_files), safe for strangers to use.

Every path meets the workspace's path rules (workspace.paths: depth, length, names that become '..'
or a separator under compatibility mapping), and a name is looked up as given, else in NFC, the
form new names are stored in.
"""

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools.base import Tool, ToolContext, ToolDenied, ToolError
from workspace import confined, paths, versions
from workspace.confined import (
    DIRECTORY_FLAGS,
    EXAMPLE,
    READ_FLAGS,
    Owner,
    PathRefused,
    WorkspaceUnavailable,
    is_symlink,
    owner_of,
    temp_name,
)
from workspace.quota import QuotaExceeded, admitted

MAX_READ_BYTES = 1_000_000
MAX_WRITE_BYTES = 1_000_000
MAX_LIST_ENTRIES = 1_000

TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_CHUNK = 64 * 1024


class ReadFileArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="Path of the file, relative to your workspace root, e.g. 'notes/todo.txt'."
    )


class WriteFileArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description=(
            "Path of the file to create or replace, relative to your workspace root, "
            "e.g. 'notes/todo.txt'. Missing parent directories are created."
        )
    )
    content: str = Field(description="The complete new text of the file (UTF-8).")


class ListFilesArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        default=".",
        description="Directory to list, relative to your workspace root; '.' is the root.",
    )


# Paths -------------------------------------------------------------------------------------------


def path_components(path: str, *, existing: bool = False) -> list[str]:
    """workspace.confined.path_components, its refusal a denial the model reads."""
    try:
        return confined.path_components(path, existing=existing)
    except PathRefused as refused:
        raise ToolDenied(str(refused)) from None


def _file_components(path: str) -> list[str]:
    """Like path_components, for a path that must name a file rather than the workspace itself."""
    if not path:
        raise ToolDenied(
            f"The path is empty. Give a file path relative to your workspace, {EXAMPLE}."
        )
    names = path_components(path)
    if not names:
        raise ToolError(
            f"{path!r} is your workspace root, not a file. Use list_files to see its contents "
            f"and give a file path, {EXAMPLE}."
        )
    return names


def _shown(names: list[str]) -> str:
    return "/".join(names) or "."


def _symlink_denied(shown: str) -> ToolDenied:
    return ToolDenied(
        f"{shown} is a symlink. File tools never follow symlinks, not even ones that point "
        "inside your workspace. Use the real path of the file or directory instead."
    )


def kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


@contextmanager
def _reporting_failures(verb: str, shown: str) -> Iterator[None]:
    """Turn an unexpected OS failure into a result the model can read, without host paths."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ToolError(f"Could not {verb} {shown}: {reason}.") from None


# Walking the workspace with file descriptors, so no symlink swapped in mid-call is ever followed --


def open_root(workspace: Path, stack: ExitStack) -> int:
    try:
        return confined.open_root(workspace, stack)
    except WorkspaceUnavailable as error:
        raise ToolError(str(error)) from None


def _enter(parent: int, names: list[str], depth: int, stack: ExitStack) -> int:
    """Open directory names[depth] inside parent (as it is stored there: names[depth] becomes
    that name), refusing it if it is a symlink."""
    name = names[depth] = paths.stored_name(parent, names[depth])
    try:
        directory = os.open(name, DIRECTORY_FLAGS, dir_fd=parent)
    except OSError as error:
        raise _directory_error(error, parent, name, _shown(names[: depth + 1])) from None
    stack.callback(os.close, directory)
    return directory


def _directory_error(error: OSError, parent: int, name: str, shown: str) -> ToolError:
    # With O_DIRECTORY, Linux reports a symlink as ENOTDIR rather than ELOOP.
    if error.errno in (errno.ELOOP, errno.ENOTDIR) and is_symlink(parent, name):
        return _symlink_denied(shown)
    if error.errno == errno.ENOTDIR:
        return ToolError(
            f"{shown} is a file, not a directory. Use read_file to read it, or list_files on "
            "the directory that contains it."
        )
    if error.errno == errno.ENOENT:
        return ToolError(
            f"{shown} does not exist in your workspace. Use list_files to see what is there."
        )
    return ToolError(f"Could not open {shown}: {error.strerror}.")


def _walk(root: int, names: list[str], stack: ExitStack) -> int:
    """Open the directory at names below root, one component at a time."""
    directory = root
    for depth in range(len(names)):
        directory = _enter(directory, names, depth, stack)
    return directory


def _walk_creating(root: int, names: list[str], owner: Owner | None, stack: ExitStack) -> int:
    """Like _walk, creating missing directories (owned by owner, when given) on the way."""
    directory = root
    for depth, name in enumerate(names):
        created = _make_directory(directory, paths.stored_name(directory, name))
        directory = _enter(directory, names, depth, stack)
        if created and owner is not None:
            os.fchown(directory, *owner)
    return directory


def _make_directory(parent: int, name: str) -> bool:
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        return False
    return True


def _missing_directories(root: int, names: list[str], stack: ExitStack) -> int:
    """How many directories along names do not exist yet (all those below the first missing)."""
    directory = root
    for depth, name in enumerate(names):
        try:
            os.stat(paths.stored_name(directory, name), dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return len(names) - depth
        directory = _enter(directory, names, depth, stack)
    return 0


# read_file ---------------------------------------------------------------------------------------


def read_file(args: ReadFileArguments, context: ToolContext) -> str:
    names = _file_components(args.path)
    shown = _shown(names)
    with ExitStack() as stack, _reporting_failures("read", shown):
        directory = _walk(open_root(context.workspace, stack), names[:-1], stack)
        names[-1] = paths.stored_name(directory, names[-1])
        data = _read_regular(_open_for_reading(directory, names[-1], shown, stack), shown)
    if not data:
        return empty_file_note(shown)
    return _decode(data, shown)


EMPTY_FILE_NOTE = " is empty (0 bytes)."


def empty_file_note(shown: str) -> str:
    """What read_file says of an empty file; is_empty_file_note tells it from a file's text."""
    return shown + EMPTY_FILE_NOTE


def is_empty_file_note(text: str) -> bool:
    return text.endswith(EMPTY_FILE_NOTE) and "\n" not in text


def _open_for_reading(directory: int, name: str, shown: str, stack: ExitStack) -> int:
    try:
        handle = os.open(name, READ_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        raise ToolError(
            f"{shown} does not exist in your workspace. Use list_files to see what is there, "
            "or write_file to create it."
        ) from None
    except OSError as error:
        if error.errno == errno.ELOOP and is_symlink(directory, name):
            raise _symlink_denied(shown) from None
        raise
    stack.callback(os.close, handle)
    return handle


def _read_regular(handle: int, shown: str) -> bytes:
    info = os.fstat(handle)
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(
            f"{shown} is a directory. Use list_files with path {shown!r} to see what it contains."
        )
    if not stat.S_ISREG(info.st_mode):
        raise ToolDenied(f"{shown} is {kind_of(info.st_mode)}; read_file only reads regular files.")
    if info.st_nlink > 1:  # O_NOFOLLOW stops symlinks, not a second name for a file elsewhere
        raise ToolDenied(
            f"{shown} has other hard links; read_file does not read a file that may live outside "
            "the workspace."
        )
    _check_read_size(info.st_size, shown)
    # The file may grow after fstat: read one byte past the cap to notice.
    data = _read_at_most(handle, MAX_READ_BYTES + 1)
    _check_read_size(len(data), shown)
    return data


def _check_read_size(size: int, shown: str) -> None:
    if size > MAX_READ_BYTES:
        raise ToolError(
            f"{shown} is {size:,} bytes, over the {MAX_READ_BYTES:,}-byte limit of read_file. "
            "Process it with code instead, or read a smaller file."
        )


def _read_at_most(handle: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(handle, min(_READ_CHUNK, remaining))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _decode(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ToolError(
            f"{shown} is not UTF-8 text: the byte at offset {error.start} cannot be decoded. "
            "read_file only reads text files; inspect binary files with code instead."
        ) from None


# write_file --------------------------------------------------------------------------------------


def would_change(args: WriteFileArguments, context: ToolContext) -> bool:
    """write_file's rule on asking: a write that leaves the file as it is (the same text there
    already) changes nothing, so nobody is asked about it; any other is asked about, as is one
    whose file cannot be read (read_file's refusals)."""
    try:
        return read_file(ReadFileArguments(path=args.path), context) != args.content
    except ToolError:
        return True


def write_file(args: WriteFileArguments, context: ToolContext) -> str:
    names = _file_components(args.path)
    shown = _shown(names)
    if args.path.endswith("/"):
        raise ToolError(
            f"{args.path!r} ends with '/', so it names a directory. Give a file name, "
            f"like '{shown}/file.txt'."
        )
    return store_bytes(context, args.path, _encode(args.content))


def store_bytes(context: ToolContext, path: str, data: bytes) -> str:
    """Write `data` to `path` in the context's workspace, confined and within its quota, as
    write_file does (another tool's output kept as a file: an MCP server's image)."""
    names = _file_components(path)
    shown = _shown(names)
    with ExitStack() as stack, _reporting_failures("write", shown), _refused_by_quota():
        root = open_root(context.workspace, stack)
        owner = owner_of(root)
        budget = stack.enter_context(admitted(root))
        missing = _missing_directories(root, names[:-1], stack)
        if missing:  # the file is new too, in directories the quota must admit with it
            what = f"{shown} ({len(data):,} bytes, {missing:,} new directories)"
            budget.admit(what, len(data), new_entries=missing + 1)
        directory = _walk_creating(root, names[:-1], owner, stack)
        names[-1] = paths.stored_name(directory, names[-1])
        shown = _shown(names)
        replaced = _replaced_size(directory, names[-1], shown)
        if not missing:
            budget.admit(
                f"{shown} ({len(data):,} bytes)",
                len(data),
                new_entries=1 if replaced is None else 0,
                replaced_bytes=replaced or 0,
            )
        _write_atomically(directory, names[-1], data, owner)
    return f"Wrote {len(data):,} bytes to {shown}."


@contextmanager
def _refused_by_quota() -> Iterator[None]:
    """The quota's refusal as the tool's result: the model reads it and may make room."""
    try:
        yield
    except QuotaExceeded as refused:
        raise ToolError(str(refused)) from None


def _encode(content: str) -> bytes:
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ToolError(
            f"The content cannot be encoded as UTF-8: character {error.start} is a lone "
            "surrogate. Send valid Unicode text."
        ) from None
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(
            f"The content is {len(data):,} bytes as UTF-8, over the {MAX_WRITE_BYTES:,}-byte "
            "limit of write_file. Split it into several smaller files."
        )
    return data


def _replaced_size(directory: int, name: str, shown: str) -> int | None:
    """The size of the regular file the write replaces (None if new); refuse any other kind.

    Checking before the rename is racy, but the rename is the backstop: it replaces a symlink
    itself rather than writing through it, and fails on a directory.
    """
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise _symlink_denied(shown)
    if stat.S_ISDIR(mode):
        raise ToolError(
            f"{shown} is a directory; write_file will not replace a directory. Write to a file "
            f"inside it, like '{shown}/file.txt', or choose another name."
        )
    if not stat.S_ISREG(mode):
        raise ToolDenied(f"{shown} is {kind_of(mode)}; write_file only replaces regular files.")
    return info.st_size


def _write_atomically(directory: int, name: str, data: bytes, owner: Owner | None) -> None:
    """Write a temp file beside the target, then rename it over: a crash leaves old or new.

    The temp file exists only under the workspace's lock, which the quota's measure takes too;
    listings show it if they meet it (it is a real file, counted while it is there), and one a
    killed worker left is the person's to see and delete."""
    temp = temp_name(name)
    handle = os.open(temp, TEMP_FLAGS, 0o644, dir_fd=directory)
    try:
        try:
            if owner is not None:
                os.fchown(handle, *owner)
            _write_all(handle, data)
            versions.record(handle, len(data), [])  # so appends to it merge (overlay_save)
            os.fsync(handle)
        finally:
            os.close(handle)
        os.rename(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=directory)
        raise


def _write_all(handle: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]


# list_files --------------------------------------------------------------------------------------


def list_files(args: ListFilesArguments, context: ToolContext) -> str:
    names = path_components(args.path)
    shown = _shown(names)
    with ExitStack() as stack, _reporting_failures("list", shown):
        directory = _walk(open_root(context.workspace, stack), names, stack)
        entries = sorted(os.listdir(directory))
        lines = [_describe_entry(directory, name) for name in entries[:MAX_LIST_ENTRIES]]
    return _listing(shown, lines, len(entries))


def _describe_entry(directory: int, name: str) -> str:
    # A name with newlines or other unprintables could forge lines of the listing: quote it.
    label = name if name.isprintable() else repr(name)
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except OSError:
        return f"{label} (could not be inspected)"
    if stat.S_ISLNK(info.st_mode):
        return f"{label} -> (symlink, not followed)"
    if stat.S_ISDIR(info.st_mode):
        return f"{label}/"
    if stat.S_ISREG(info.st_mode):
        return f"{label} ({info.st_size:,} bytes)"
    return f"{label} ({kind_of(info.st_mode)})"


def _listing(shown: str, lines: list[str], total: int) -> str:
    place = "Your workspace" if shown == "." else f"{shown}/"
    if total == 0:
        return f"{place} is empty."
    noun = "entry" if total == 1 else "entries"
    text = "\n".join([f"{place} contains {total:,} {noun}:", *lines])
    if total > len(lines):
        text += f"\n[Only the first {len(lines):,} of {total:,} entries are shown.]"
    return text


READ_FILE = Tool(
    name="read_file",
    description=(
        "Read a UTF-8 text file from your workspace and return its contents. Paths are relative "
        "to the workspace root, e.g. 'notes/todo.txt'. Absolute paths, '..' and symlinks are "
        f"refused, and so are files over {MAX_READ_BYTES:,} bytes."
    ),
    arguments=ReadFileArguments,
    function=read_file,
)

WRITE_FILE = Tool(
    name="write_file",
    description=(
        "Create or replace a UTF-8 text file in your workspace with the given content, creating "
        "missing parent directories. The whole file is replaced at once. Paths are relative to "
        "the workspace root, e.g. 'notes/todo.txt'. Absolute paths, '..' and symlinks are "
        f"refused, and so is content over {MAX_WRITE_BYTES:,} bytes."
    ),
    arguments=WriteFileArguments,
    function=write_file,
    asks=would_change,
)

LIST_FILES = Tool(
    name="list_files",
    description=(
        "List one directory of your workspace (the root by default). Directories end with '/', "
        "files show their size, and symlinks are shown but never followed."
    ),
    arguments=ListFilesArguments,
    function=list_files,
)
