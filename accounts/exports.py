"""Whether a person may start an export of their data now (accounts/my_data.py makes it), and its
sending: one export at a time per person, one started per LOOP_EXPORT_INTERVAL_SECONDS, and
LOOP_EXPORTS_AT_ONCE on the whole site.

An export holds PostgreSQL advisory locks on a database connection of its own, so every web
process sees them, and they go when the connection closes: when the zip is sent, when the client
goes away (Django closes the response either way), or when the process dies.
"""

import math
from collections.abc import AsyncIterator, Generator, Iterator
from http import HTTPStatus

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.core.handlers.asgi import ASGIRequest
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import ExportStart
from agent.connections import connection_of_its_own

PERSON_LOCK = "loop.export.person:{}"
SLOT_LOCK = "loop.export.slot:{}"
# When to try again while the site makes as many exports as it makes at once: a large one takes
# some seconds.
SITE_BUSY_RETRY_SECONDS = 60
UNDER_WAY = (
    "An export of your data is already under way (in another tab or on another device). "
    "Let it finish before you start another."
)
TOO_SOON = "Loop makes one export of your data every {interval}. You can export again in {wait}."
SITE_BUSY = "Loop is making as many exports as it makes at once. Try again in a minute."


class ExportRefused(Exception):
    """An export that may not start now: the sentence the person reads, the status to answer
    with, and in how many seconds to try again, when that is known."""

    def __init__(self, message: str, status: HTTPStatus, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after


class HeldExport:
    """The locks of one export under way, on a connection no other code uses and outside the
    pool (a lock taken on the request's own connection would be taken again by the same session,
    and outlive the request in the pool)."""

    def __init__(self) -> None:
        self._connection: BaseDatabaseWrapper = connection_of_its_own()

    def lock(self, key: str) -> bool:
        with self._connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [key])
            return bool(cursor.fetchone()[0])

    def release(self) -> None:
        """Let go of every lock: they belong to the connection's session."""
        self._connection.close()


def start_export(user: User) -> HeldExport:
    """Hold the person's export and a place among the site's, and count it as started; or
    ExportRefused, holding nothing."""
    held = HeldExport()
    try:
        admit(held, user)
    except BaseException:
        held.release()
        raise
    return held


def admit(held: HeldExport, user: User) -> None:
    if not held.lock(PERSON_LOCK.format(user.pk)):
        raise ExportRefused(UNDER_WAY, HTTPStatus.CONFLICT)
    # Only the holder of the person's lock reads and writes the time below: no race.
    wait = seconds_to_wait(user)
    if wait:
        interval = duration(settings.LOOP_EXPORT_INTERVAL_SECONDS)
        message = TOO_SOON.format(interval=interval, wait=duration(wait))
        raise ExportRefused(message, HTTPStatus.TOO_MANY_REQUESTS, wait)
    slots = range(settings.LOOP_EXPORTS_AT_ONCE)
    if not any(held.lock(SLOT_LOCK.format(slot)) for slot in slots):
        raise ExportRefused(SITE_BUSY, HTTPStatus.SERVICE_UNAVAILABLE, SITE_BUSY_RETRY_SECONDS)
    ExportStart.objects.update_or_create(user=user, defaults={"started_at": timezone.now()})


def seconds_to_wait(user: User) -> int:
    """How long until the person may start another export; 0: now."""
    started = ExportStart.objects.filter(user=user).values_list("started_at", flat=True).first()
    if started is None:
        return 0
    since = (timezone.now() - started).total_seconds()
    return max(0, math.ceil(settings.LOOP_EXPORT_INTERVAL_SECONDS - since))


def duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


class ExportStream:
    """The zip's chunks as the response sends them; closing it (Django closes the response when
    it is sent or its client went away) stops making the zip and lets go of the export's locks.
    A stream never started holds the locks too, so they are let go here, not in the chunks'
    generator, whose `finally` would not run."""

    def __init__(self, chunks: Generator[bytes], held: HeldExport) -> None:
        self._chunks = chunks
        self._held = held

    def close(self) -> None:
        try:
            self._chunks.close()
        finally:
            self._held.release()


class SyncExportStream(ExportStream):
    def __iter__(self) -> Iterator[bytes]:
        return self._chunks


def next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


class AsyncExportStream(ExportStream):
    """Under ASGI Django reads a synchronous iterator whole before sending a byte of it, which
    would hold the whole zip in memory: here each chunk is made in the request's own thread (its
    database connection) and sent before the next is made."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pull = sync_to_async(next_chunk, thread_sensitive=True)
        try:
            while (chunk := await pull(self._chunks)) is not None:
                yield chunk
        except Exception:
            # Django's ASGI handler closes the response when it is sent or the client went
            # away, not when making it failed: let go of the locks here then.
            await sync_to_async(self.close, thread_sensitive=True)()
            raise


def export_stream(
    request: HttpRequest, chunks: Generator[bytes], held: HeldExport
) -> SyncExportStream | AsyncExportStream:
    if isinstance(request, ASGIRequest):
        return AsyncExportStream(chunks, held)
    return SyncExportStream(chunks, held)
