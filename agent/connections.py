"""A run's thread borrows a database connection for a write and gives it back, instead of holding
one for the run's life: with a pool (loopsite/database.py), the sessions a worker holds stay
under its pool's size however many runs it works at once."""

from django.db import DEFAULT_DB_ALIAS, connections


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
