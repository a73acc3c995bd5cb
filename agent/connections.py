"""A run's thread borrows a database connection for a write and gives it back, instead of holding
one for the run's life: with a pool (loopsite/database.py), the sessions a worker holds stay
under its pool's size however many runs it works at once. And whether an error says the database
is not answering, which the web's 503 page, the socket's reconnect and the embedded server's
restart each ask (below chat and loopsite, so neither imports up into the other)."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, InterfaceError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

# The server said it cannot serve now: shutting down, crashed, or (re)starting.
_SERVER_UNAVAILABLE = {"57P01", "57P02", "57P03"}


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


@contextmanager
def statement_session(alias: str = DEFAULT_DB_ALIAS) -> Iterator[psycopg.Connection[Any]]:
    """The session one statement runs on: this thread's own connection when it has one open (in
    a transaction, say, or in a test's), else one the pool lends for this statement alone and
    takes back at once. The second is the way of a run's every write (its thread holds nothing
    between them): it borrows as Django's connect does (its wait, its refusal, the embedded
    server started again) but skips what Django does around a borrow (its settings read again,
    its autocommit and session state set again, its signals), which cost a run's step as much
    again as the borrow itself."""
    connection = connections[alias]
    pool = getattr(connection, "pool", None)
    if pool is None or connection.connection is not None or connection.in_atomic_block:
        connection.ensure_connection()
        yield connection.connection
        return
    lent = connection.get_new_connection({})
    try:
        if not lent.autocommit:  # given back so by a thread that closed it in a transaction
            lent.autocommit = True
        yield lent
    finally:
        pool.putconn(lent)  # one the statement broke is replaced by the pool


def connection_of_its_own(alias: str = DEFAULT_DB_ALIAS) -> BaseDatabaseWrapper:
    """A connection outside the pool, for a session whose state must end with it (advisory
    locks held across requests): a pooled one would be lent on, its locks still held."""
    settings = connections.settings[alias]
    options = {name: value for name, value in settings["OPTIONS"].items() if name != "pool"}
    backend = load_backend(settings["ENGINE"])
    wrapper: BaseDatabaseWrapper = backend.DatabaseWrapper(
        {**settings, "OPTIONS": options, "CONN_MAX_AGE": 0}, alias
    )
    return wrapper


def database_unreachable(error: BaseException | None) -> bool:
    """Whether `error` (or what caused it) says the database is not answering: no server on the
    socket or port, a connection lost or closed, a server shutting down or starting up. Not a
    query's own failure (a constraint, a deadlock, a timeout of a statement)."""
    while error is not None:
        if isinstance(error, psycopg.InterfaceError | InterfaceError):
            return True
        if isinstance(error, psycopg.OperationalError):
            state = error.sqlstate
            return state is None or state.startswith("08") or state in _SERVER_UNAVAILABLE
        error = error.__cause__
    return False
