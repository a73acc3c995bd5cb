"""Which earlier versions of a workspace file its content starts with, so that appends merge.

Every writer of a workspace file (write_file, uploads, the saver of run_code's files) gives the
version it writes an id, kept in an extended attribute of the file with its size and, newest
first, the ids and sizes of the versions before it whose whole content it starts with: a version
that only appended to the one it replaced extends that one's list, any other starts a new list.
The overlay a snippet writes into copies a file's extended attributes when the snippet first
writes to it, so the saver knows which version the snippet's copy started from, and whether the
workspace's version now still starts with it (sandbox/overlay_save.py).

Standard library only, and no Django: the saver loads this file by path, under the system
interpreter, without the project on sys.path.
"""

import os
from contextlib import suppress

ATTRIBUTE = "user.loop.versions"
# Appends saved one after another while a snippet runs; one it started before more of them than
# this is set aside, as any other clash is. 64 entries take about 1.6 KB, within a file system
# block beside other attributes.
KEPT = 64
_ID_BYTES = 8

Version = tuple[str, int]  # (id, size in bytes)


def versions(handle: int) -> list[Version]:
    """An open file's version and the versions it starts with, newest first; [] if none is
    recorded (a file written another way) or the record is not one a writer made."""
    try:
        text = os.getxattr(handle, ATTRIBUTE)
    except OSError:
        return []
    words = text.decode("ascii", errors="replace").split()
    if len(words) % 2 or len(words) > 2 * KEPT:
        return []
    pairs = list(zip(words[::2], words[1::2], strict=True))
    if not all(len(key) == 2 * _ID_BYTES and size.isdigit() for key, size in pairs):
        return []
    return [(key, int(size)) for key, size in pairs]


def record(handle: int, size: int, starts_with: list[Version]) -> None:
    """Give the version just written to an open file (`size` bytes) a new id, beside the versions
    its content starts with. A file system without user attributes records nothing: appends to
    its files are then set aside as clashes, as any other."""
    kept = [(os.urandom(_ID_BYTES).hex(), size), *starts_with][:KEPT]
    text = " ".join(f"{key} {size}" for key, size in kept)
    with suppress(OSError):
        os.setxattr(handle, ATTRIBUTE, text.encode("ascii"))


def start_alike(first: int, second: int, size: int) -> bool:
    """Whether two open files both hold at least `size` bytes and the same first `size`."""
    chunk = 1 << 20
    for offset in range(0, size, chunk):
        length = min(chunk, size - offset)
        ours = os.pread(first, length, offset)
        if len(ours) != length or ours != os.pread(second, length, offset):
            return False
    return True
