"""Django's PostgreSQL backend with Loop's rules for its pool: a thread that waits for a pooled
connection past LOOP_DB_POOL_TIMEOUT fails saying why, and while the database refuses new
sessions a thread with nothing idle to borrow fails at once, as it would without a pool."""

import time
from functools import cache
from typing import Any, ClassVar, Self

import psycopg
from django.db.backends.postgresql import base
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from loopsite.database import PoolExhausted

# A failed try to connect counts for this long: meanwhile nobody waits on the pool for a session
# that cannot come (the pool keeps trying by itself, and the first borrow after it waits again).
RECENT_FAILURE_SECONDS = 2.0


class WatchedConnection(psycopg.Connection[TupleRow]):
    """A pool's connection (the pool makes them in threads of its own), remembering, for its
    pool, whether its last try to connect failed and how."""

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
        if pool is not None:
            refused_now(pool)
        try:
            return super().get_new_connection(conn_params)
        except PoolTimeout as error:
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
    """Raise the database's own refusal when the pool's last try to connect failed a moment ago
    and it has no connection idle: a request is answered 503 at once, not after the pool's
    timeout (the first one after an outage still waits)."""
    failed = getattr(pool.connection_class, "failed", None)
    if failed is None:
        return
    at, error = failed
    age = time.monotonic() - at
    if age > RECENT_FAILURE_SECONDS or pool.get_stats()["pool_available"]:
        return
    raise psycopg.OperationalError(f"{error} (the pool's last try to connect, {age:.1f} s ago)")
