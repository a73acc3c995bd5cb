"""Django's PostgreSQL backend with Loop's rules for its pool: a thread that waits for a pooled
connection past LOOP_DB_POOL_TIMEOUT fails saying why, and while the database refuses new
sessions a thread with nothing idle to borrow fails at once, as it would without a pool."""

import time
from functools import cache
from typing import Any, ClassVar, Self

import psycopg
from django.db.backends.postgresql import base
from psycopg import IsolationLevel
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from loopsite.database import PoolExhausted

PROBE_SECONDS = 2  # libpq's connect_timeout: whole seconds
# A thread waiting for a connection looks again whether the database refuses this often (each
# look puts it back at the end of the pool's queue: not too often).
WAIT_SLICE_SECONDS = 5.0
DEFAULT_LEVEL = IsolationLevel.READ_COMMITTED  # Django's when OPTIONS names none


class WatchedConnection(psycopg.Connection[TupleRow]):
    """A pool's connection (the pool makes them in threads of its own), remembering, for its
    pool, whether its last try to connect failed and how, until one works again."""

    failed: ClassVar[tuple[float, Exception] | None] = None

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        try:
            cls.before_connecting()
            connection = super().connect(conninfo, **kwargs)
        except Exception as error:
            cls.failed = (time.monotonic(), error)
            raise
        cls.failed = None
        return connection

    @classmethod
    def before_connecting(cls) -> None:
        """What a backend needs done before each new session (nothing here)."""


@cache
def watched(alias: str) -> type[WatchedConnection]:
    """The connection class of one database's pool."""
    return type("WatchedConnection", (WatchedConnection,), {})


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        """Django's pool, whose connections are of `pool_connection_class`."""
        options = self.settings_dict["OPTIONS"].get("pool")
        if isinstance(options, dict) and self.alias not in self._connection_pools:
            options.setdefault("connection_class", self.pool_connection_class())
        return super().pool

    def pool_connection_class(self) -> type[WatchedConnection]:
        return watched(self.alias)

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        pool = self.pool
        if pool is None:
            return super().get_new_connection(conn_params)
        # Django 5.2's own borrow (base.DatabaseWrapper.get_new_connection), but waiting in
        # slices, so that a database that stops answering meanwhile is seen within one.
        level = self.settings_dict["OPTIONS"].get("isolation_level")
        self.isolation_level = IsolationLevel(level) if level is not None else DEFAULT_LEVEL
        pool.open()
        connection = self.borrow(pool)
        if level is not None:
            connection.isolation_level = self.isolation_level
        return connection

    def borrow(self, pool: ConnectionPool) -> Any:
        """A connection from the pool within its timeout; PoolExhausted when none came free, the
        database's own error when it refuses new sessions."""
        deadline = time.monotonic() + pool.timeout
        while True:
            refused_now(pool)
            left = deadline - time.monotonic()
            try:
                return pool.getconn(timeout=max(0.01, min(WAIT_SLICE_SECONDS, left)))
            except PoolTimeout as error:
                if time.monotonic() >= deadline:
                    raise self.exhausted() from error

    def exhausted(self) -> PoolExhausted:
        pool = self.pool
        size, waited = (pool.max_size, pool.timeout) if pool is not None else (0, 0.0)
        return PoolExhausted(
            f"No database connection came free within {waited:g} s: all {size} of this "
            f"process's pool are lent (LOOP_DB_POOL_SIZE, LOOP_DB_POOL_TIMEOUT; see "
            "docs/deploy.md), or the database does not accept new ones."
        )


def refused_now(pool: ConnectionPool) -> None:
    """While the pool's last try to connect failed (and none has worked since) and it has no
    connection idle, try one session directly (a Unix socket or a TCP connect, milliseconds): the
    database's own refusal is raised at once, so a request is answered 503 as without a pool,
    not after the pool's timeout; once it answers again, the borrow waits for the pool's own
    next try."""
    if getattr(pool.connection_class, "failed", None) is None:
        return
    if pool.get_stats()["pool_available"]:
        return
    kwargs = {"connect_timeout": PROBE_SECONDS, **(pool.kwargs or {})}
    with pool.connection_class.connect(pool.conninfo, **kwargs):
        pass  # it answers (and the record of the failure is gone): the pool connects by itself
