"""Django's PostgreSQL backend, saying plainly when its pool had no connection to lend in time."""

from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import PoolTimeout

from loopsite.database import PoolExhausted


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
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
