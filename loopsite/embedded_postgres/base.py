"""The PostgreSQL backend, pointed at the embedded server it starts on demand."""

from pathlib import Path
from typing import Any

from django.db.backends.postgresql import base

from loopsite.embedded_postgres.server import SUPERUSER, socket_dir


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        embedded = self.settings_dict["EMBEDDED"]
        params["host"] = str(socket_dir(Path(embedded["DATA_DIR"]), embedded["DATABASE"]))
        params["user"] = SUPERUSER
        return params
