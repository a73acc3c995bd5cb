"""Django's PostgreSQL backend with Loop's rules for its pool: a thread that waits for a pooled
connection past LOOP_DB_POOL_TIMEOUT fails saying why, and while the database refuses new
sessions a thread with nothing idle to borrow fails at once, as it would without a pool; and
a connection it lends is checked by a look at its socket, not a round trip to the server."""

import select
import time
from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar, Self

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
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
# A connection not lent for this long gets a round trip before it is lent again: a server whose
# host went away without closing its sockets leaves nothing on them to see.
QUIET_SECONDS = 10.0


class WatchedConnection(psycopg.Connection[TupleRow]):
    """A pool's connection (the pool makes them in threads of its own), remembering, for its
    pool, whether its last try to connect failed and how, until one works again."""

    failed: ClassVar[tuple[float, Exception] | None] = None
    lent_at = float("-inf")  # when the pool last lent it (`check_cheaply`)

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


def check_cheaply(connection: WatchedConnection) -> None:
    """The pool's check of a connection before it lends it: raises if the session is dead, and
    the pool lends another (a fresh one once none is left).

    psycopg_pool's own check, which Django gives its pool with CONN_HEALTH_CHECKS, is a round
    trip to the server at every borrow, and a run borrows at each write it makes: two of a
    step's four round trips, a third of its time. A session the server ended (a restart, a
    crash, pg_terminate_backend) says so on its socket: the server sends why and closes it, or
    its process dies and the kernel closes it, and either makes the socket readable, where an
    idle session's has nothing to read. So the round trip is made only when the socket has
    something to read, psycopg already knows the connection is broken, or it was not lent for
    QUIET_SECONDS (a server host gone without closing its sockets says nothing)."""
    now = time.monotonic()
    quiet = now - connection.lent_at > QUIET_SECONDS
    if quiet or connection.broken or connection.closed or readable(connection.fileno()):
        ConnectionPool.check_connection(connection)
    connection.lent_at = now


def readable(descriptor: int) -> bool:
    """Whether a socket has something to read, or was closed or failed (without waiting)."""
    poller = select.poll()
    poller.register(descriptor, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def kwargs_of(pool: ConnectionPool) -> dict[str, Any]:
    """The keyword arguments the pool connects with (psycopg_pool also takes a callable)."""
    given = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    return given or {}


class DatabaseWrapper(base.DatabaseWrapper):
    # Django 5.2's own, private, which django-stubs does not declare.
    _connection_pools: ClassVar[dict[str, ConnectionPool]]
    _configure_connection: Callable[[psycopg.Connection[Any]], None]

    @property
    def pool(self) -> ConnectionPool | None:
        """Django 5.2's pool (base.DatabaseWrapper.pool, made the same way), whose connections
        are of `pool_connection_class` and, with CONN_HEALTH_CHECKS, checked by
        `check_cheaply`."""
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            checks = self.settings_dict["CONN_HEALTH_CHECKS"]
            pool = ConnectionPool(
                kwargs={**self.get_connection_params(), "autocommit": True},
                open=False,  # opened at the first borrow
                configure=self._configure_connection,
                check=check_cheaply if checks else None,
                **{
                    "connection_class": self.pool_connection_class(),
                    **(options if isinstance(options, dict) else {}),
                },
            )
            # Threads that made a pool at the same moment: the first one set is everyone's.
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]

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
    # As the pool connects: its conninfo and kwargs, or what the callables it was given return.
    conninfo = pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()
    kwargs = {"connect_timeout": PROBE_SECONDS, **kwargs_of(pool)}
    with pool.connection_class.connect(conninfo, **kwargs):
        pass  # it answers (and the record of the failure is gone): the pool connects by itself
