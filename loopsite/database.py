"""The DATABASES entry: the server named by DATABASE_URL, or else the embedded PostgreSQL, each
process's pool of connections to it; and the web's rule that a request leaves no connection open
behind it."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured
from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

EMBEDDED_DATABASE = "loop"
_SCHEMES = {"postgres", "postgresql"}
# Sessions a pool keeps open while its process is idle; it grows to its size under load, and
# what it opened beyond this closes after psycopg_pool's max_idle (10 minutes) unused.
POOL_MIN_SIZE = 1


@dataclass(frozen=True)
class Pool:
    """Each process's pool of database connections (Django's own, on psycopg_pool): at most
    `size` sessions whatever the load, and a thread that finds them all lent waits at most
    `timeout` seconds for one, then fails with PoolExhausted. A thread borrows a connection at
    its first query and gives it back when Django closes it (at a request's end, after each
    event a run records: agent/connections.py). Size 0: no pool, each thread keeps a connection
    of its own (CONN_MAX_AGE), so sessions grow with the threads (docs/deploy.md)."""

    size: int
    timeout: float

    def options(self) -> dict[str, Any]:
        return {
            "min_size": min(POOL_MIN_SIZE, self.size),
            "max_size": self.size,
            "timeout": self.timeout,
        }


class PoolExhausted(PoolTimeout):
    """No connection of this process's pool came free in time: every one is lent (the load
    needs a bigger LOOP_DB_POOL_SIZE, or something holds its connection too long), or the
    server does not accept new ones."""


def database_settings(url: str, var_dir: Path, pool: Pool | None = None) -> dict[str, Any]:
    if not url:
        return embedded_settings(var_dir, pool)
    return url_settings(url, pool)


def connection_settings(options: dict[str, Any], pool: Pool | None) -> dict[str, Any]:
    """How connections are kept: lent by the pool (which wants CONN_MAX_AGE 0: Django's close
    gives the connection back), or, without one, kept per thread for a minute (the websocket
    reads the log per event: no connect per read). The health check is the pool's check of a
    connection it lends, or Django's of a kept one: after a database restart, no request and no
    run meets a dead session."""
    if pool is None or pool.size <= 0:
        return {"OPTIONS": options, "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True}
    return {
        "OPTIONS": {**options, "pool": pool.options()},
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
    }


def embedded_settings(var_dir: Path, pool: Pool | None = None) -> dict[str, Any]:
    return {
        "ENGINE": "loopsite.embedded_postgres",
        "NAME": EMBEDDED_DATABASE,
        "EMBEDDED": {"DATA_DIR": str(var_dir / "postgres"), "DATABASE": EMBEDDED_DATABASE},
        **connection_settings({}, pool),
    }


def url_settings(url: str, pool: Pool | None = None) -> dict[str, Any]:
    """Parse a postgres:// URL with libpq's own parser; query parameters become OPTIONS."""
    if urlsplit(url).scheme not in _SCHEMES:
        raise ImproperlyConfigured("DATABASE_URL must be a postgres:// or postgresql:// URL.")
    try:
        params: dict[str, Any] = conninfo_to_dict(url)
    except ProgrammingError as error:
        raise ImproperlyConfigured(f"DATABASE_URL is malformed: {error}") from None
    name = params.pop("dbname", "")
    port = params.pop("port", "")
    if port and not port.isdigit():
        raise ImproperlyConfigured(f"DATABASE_URL has a malformed port: {port!r}.")
    if not name:
        raise ImproperlyConfigured("DATABASE_URL must name a database, e.g. postgres://host/loop.")
    return {
        "ENGINE": "loopsite.postgres",
        "NAME": name,
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": port,
        **connection_settings(params, pool),
    }
