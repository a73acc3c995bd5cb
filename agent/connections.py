"""A run's thread borrows a database connection for a write and gives it back, instead of holding
one for the run's life: with a pool (loopsite/database.py), the sessions a worker holds stay
under its pool's size however many runs it works at once."""

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend


def release_connection(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Give this thread's connection back to its pool, unless a transaction is open on it (it
    goes back when the transaction's owner is done). Without a pool the connection is kept:
    closing it would only cost a new session at the next write."""
    connection = connections[alias]
    if connection.connection is None or connection.in_atomic_block:
        return
    if getattr(connection, "pool", None) is None:
        return
    connection.close()


def connection_of_its_own(alias: str = DEFAULT_DB_ALIAS) -> BaseDatabaseWrapper:
    """A connection outside the pool, for a session whose state must end with it (advisory
    locks held across requests): a pooled one would be lent on, its locks still held."""
    settings = connections.settings[alias]
    options = {name: value for name, value in settings["OPTIONS"].items() if name != "pool"}
    backend = load_backend(settings["ENGINE"])
    return backend.DatabaseWrapper({**settings, "OPTIONS": options, "CONN_MAX_AGE": 0}, alias)
