"""The PostgreSQL backend, pointed at the embedded server it starts on demand, and starts again
when a connection finds it gone."""

import logging
import time
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from agent.connections import database_unreachable
from loopsite.database import PoolExhausted
from loopsite.embedded_postgres.server import (
    SUPERUSER,
    await_start,
    revive,
    socket_dir,
    starting,
)
from loopsite.postgres import base

logger = logging.getLogger(__name__)

CONNECT_SECONDS = 5.0  # how long a connection is tried again while the server comes back
CONNECT_RETRY_SECONDS = 0.1


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pgdata(self) -> Path:
        return Path(self.settings_dict["EMBEDDED"]["DATA_DIR"])

    def pool_connection_class(self) -> type[base.WatchedConnection]:
        """The pool's connections start the server again when it is gone."""
        embedded = self.settings_dict["EMBEDDED"]
        return reviving(Path(embedded["DATA_DIR"]), embedded["DATABASE"])

    def connect(self) -> None:
        """Borrow from the pool, or connect. A borrow skips the look at the server (a file read
        and a process lookup, at each of a run's events): the pool's connections make it when
        they connect (`RevivingConnection`)."""
        self.borrowing = self.pool is not None and self.alias in self._connection_pools
        try:
            super().connect()
        finally:
            self.borrowing = False

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if getattr(self, "borrowing", False):  # unused: the pool has its own
            params["host"] = base.kwargs_of(self._connection_pools[self.alias])["host"]
            params["user"] = SUPERUSER
            return params
        try:
            directory = socket_dir(self.pgdata, self.settings_dict["EMBEDDED"]["DATABASE"])
        except Exception as error:
            raise not_started(self.pgdata, error) from error
        params["host"] = str(directory)
        params["user"] = SUPERUSER
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        """Connect; if the server is gone (it was killed, or crashed), start it again and
        connect once more. Every new connection comes here, and CONN_HEALTH_CHECKS replaces a
        dead one at the next request, so the first request after an outage brings it back.

        A postmaster killed a moment ago can still look alive while it is torn down, and one
        just started can still refuse: so connecting is tried again, briefly.

        With a pool, the pool's own connections do that (`reviving`), in the pool's threads;
        a borrow whose wait ran out while one of them was still starting the server (a slow
        start on a busy machine) waits for that start, then borrows once more."""
        if self.pool is not None:
            try:
                return super().get_new_connection(conn_params)
            except PoolExhausted:
                if not starting():
                    raise
            await_start()
            return super().get_new_connection(conn_params)
        deadline = time.monotonic() + CONNECT_SECONDS
        revived = False
        while True:
            if revived:  # a moment for a server still being torn down or coming up
                time.sleep(CONNECT_RETRY_SECONDS)
            try:
                return super().get_new_connection(conn_params)
            except psycopg.OperationalError as error:
                if not database_unreachable(error) or time.monotonic() > deadline:
                    raise
                failed = error
            try:
                directory = revive(self.pgdata)
            except Exception as error:
                raise not_started(self.pgdata, error) from failed
            conn_params = {**conn_params, "host": str(directory)}
            revived = True


class RevivingConnection(base.WatchedConnection):
    """A pooled connection to the embedded server: before each new session, the server is
    started again if it is no longer running (a look at its postmaster.pid)."""

    pgdata: ClassVar[Path]
    database: ClassVar[str]

    @classmethod
    def before_connecting(cls) -> None:
        try:
            socket_dir(cls.pgdata, cls.database)
        except Exception as error:
            raise not_started(cls.pgdata, error) from error


@cache
def reviving(pgdata: Path, database: str) -> type[RevivingConnection]:
    """The connection class of one embedded server's pool (one class per server)."""
    attributes = {"pgdata": pgdata, "database": database}
    return type("RevivingConnection", (RevivingConnection,), attributes)


def not_started(pgdata: Path, error: Exception) -> psycopg.OperationalError:
    """A failed start, as the error a failed connection raises (Django wraps it as its
    OperationalError, and a request that meets it is answered 503)."""
    logger.warning("The embedded PostgreSQL in %s could not be started: %r", pgdata, error)
    return psycopg.OperationalError(
        f"The embedded PostgreSQL in {pgdata} could not be started: {error}"
    )
