"""How every reader and writer reaches into a workspace, the file tools and the Files panel alike:
a path refused if it could lead outside, and the workspace opened by descriptor, so that a name is
then opened one component at a time and no symlink is ever followed.

The refusals here are sentences a reader of either kind can be shown: the file tools give them to
the model as a denial (tools.files), the panel to its person (workspace.browse).
"""

import os
import re
import secrets
import stat
from contextlib import ExitStack
from pathlib import Path

from workspace import paths

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK so that opening a FIFO cannot hang the worker; O_NOCTTY so a tty never becomes ours.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_TOKEN_BYTES = 8
# Long enough to recognise the file, short enough that the temp name stays under NAME_MAX.
_TEMP_STEM_CHARS = 200
_DRIVE_LETTER = re.compile(r"[A-Za-z]:")
EXAMPLE = "like 'notes/todo.txt'"

Owner = tuple[int, int]


class PathRefused(Exception):
    """A path that could lead outside the workspace, or that its path rules refuse."""


class WorkspaceUnavailable(Exception):
    """The workspace cannot be opened (its directory is gone or unreadable)."""


def path_components(path: str, *, existing: bool = False) -> list[str]:
    """The names along a relative path, after refusing anything that could lead outside or
    that the workspace's path rules refuse; with existing, the path of an entry already there
    (one made before the rules, to be removed), which those rules do not judge."""
    _refuse_hostile(path)
    names = [name for name in path.split("/") if name not in ("", ".")]
    problem = paths.path_problem("/".join(names)) if names and not existing else None
    if problem is not None:
        raise PathRefused(problem)
    return names


def _refuse_hostile(path: str) -> None:
    if "\x00" in path:
        raise PathRefused(f"The path contains a NUL byte. Use a plain relative path, {EXAMPLE}.")
    control = next((char for char in path if char < " " or char == "\x7f"), None)
    if control is not None:
        raise PathRefused(
            f"The path {path!r} contains the control character {control!r}. "
            f"Use a plain relative path, {EXAMPLE}."
        )
    if "\\" in path:
        raise PathRefused(
            f"The path {path!r} contains a backslash. Separate directories with '/', {EXAMPLE}."
        )
    if _DRIVE_LETTER.match(path):
        raise PathRefused(
            f"The path {path!r} starts with a drive letter. Paths are relative to your "
            f"workspace root, {EXAMPLE}."
        )
    if path.startswith("/"):
        raise PathRefused(
            f"The path {path!r} is absolute. Use a path relative to your workspace root, "
            f"{EXAMPLE}; the root itself is '.'."
        )
    if ".." in path.split("/"):
        raise PathRefused(
            f"The path {path!r} contains '..', which is refused: file tools only reach inside "
            f"your workspace. Use a path relative to the workspace root, {EXAMPLE}."
        )


def is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_root(workspace: Path, stack: ExitStack) -> int:
    """The workspace's directory, open until the stack closes it."""
    try:
        root = os.open(workspace, _ROOT_FLAGS)
    except OSError:
        raise WorkspaceUnavailable(
            "Your workspace is not available right now. Try again later."
        ) from None
    stack.callback(os.close, root)
    return root


def owner_of(root: int) -> Owner | None:
    """Whom new entries must belong to: snippets run as the workspace's owner and must edit them."""
    if os.geteuid() != 0:
        return None
    info = os.fstat(root)
    return info.st_uid, info.st_gid


def temp_name(name: str) -> str:
    """A dot-name beside `name`, unlikely to be any other's (64 random bits)."""
    stem = name.encode()[:_TEMP_STEM_CHARS].decode(errors="ignore")  # bytes: the disk's limit
    return f".{stem}.{secrets.token_hex(_TEMP_TOKEN_BYTES)}.tmp"
