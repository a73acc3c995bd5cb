"""The PostgreSQL backend, pointed at the embedded server it starts on demand, and starts again
when a connection finds it gone."""

import logging
import time
from pathlib import Path
from typing import Any

import psycopg
from django.db.backends.postgresql import base

from loopsite.database import database_unreachable
from loopsite.embedded_postgres.server import SUPERUSER, revive, socket_dir

logger = logging.getLogger(__name__)

CONNECT_SECONDS = 5.0  # how long a connection is tried again while the server comes back
CONNECT_RETRY_SECONDS = 0.1


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pgdata(self) -> Path:
        return Path(self.settings_dict["EMBEDDED"]["DATA_DIR"])

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
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
        just started can still refuse: so connecting is tried again, briefly."""
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


def not_started(pgdata: Path, error: Exception) -> psycopg.OperationalError:
    """A failed start, as the error a failed connection raises (Django wraps it as its
    OperationalError, and a request that meets it is answered 503)."""
    logger.warning("The embedded PostgreSQL in %s could not be started: %r", pgdata, error)
    return psycopg.OperationalError(
        f"The embedded PostgreSQL in {pgdata} could not be started: {error}"
    )
