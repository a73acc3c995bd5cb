"""How a persisted event reaches the pages watching its run, from whichever process ran it.

A run's events are appended to its log by the worker (agent/recorder.py). Each page's socket
(chat/consumers.py) joins its run's channel-layer group; a message to that group says only "run R
has event S", and the socket reads what it has not sent yet from the log. So a message lost, late
or doubled never loses or doubles a step: the log is the truth, the message a wake-up call.

- REDIS_URL set: the worker sends the message through channels_redis right after the event is
  stored; web servers and workers may be on separate machines.
- No REDIS_URL: the worker's INSERT of the event also runs `pg_notify` in the same statement, so
  the notification is delivered only once the event is durable. Each web process keeps one
  connection LISTENing (`NotifyListener`) and passes the wake-up to its in-memory channel layer.
"""

import asyncio
import json
import logging
import threading
from collections import Counter
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "loop_run_events"
DELTA_CHANNEL = "loop_run_deltas"
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; a delta is a few words.
MAX_DELTA_CHARS = 1000
RECONNECT_SECONDS = 1.0
PUBLISH_SECONDS = 2.0


def group_for(run_id: int) -> str:
    return f"run-{run_id}"


def wake_up(run_id: int, seq: int) -> dict[str, Any]:
    return {"type": "run.event", "run": run_id, "seq": seq}


def notifies() -> bool:
    """Whether events travel by PostgreSQL NOTIFY (no REDIS_URL) rather than by Redis."""
    return not settings.REDIS_URL


def delta(run_id: int, step: int, text: str) -> dict[str, Any]:
    return {"type": "run.delta", "run": run_id, "step": step, "text": text}


def publish_delta(run_id: int, step: int, text: str) -> None:
    """A piece of the reply to step `step` as the model writes it; never stored."""
    for start in range(0, len(text), MAX_DELTA_CHARS):
        piece = text[start : start + MAX_DELTA_CHARS]
        if notifies():
            payload = json.dumps({"run": run_id, "step": step, "text": piece})
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [DELTA_CHANNEL, payload])
        else:
            _publisher.send(group_for(run_id), delta(run_id, step, piece))


def publish(run_id: int, seq: int) -> None:
    """Tell the pages watching the run that event `seq` is stored (the Redis path)."""
    if not notifies():
        _publisher.send(group_for(run_id), wake_up(run_id, seq))


class Publisher:
    """Sends from synchronous code (a worker's run) on one event loop kept for the process, so
    the channel layer's Redis connections are made once, not once per event."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()

    def send(self, group: str, message: dict[str, Any]) -> None:
        with self.lock:
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self.loop.run_forever, name="loop-event-publisher", daemon=True
                ).start()
        sent = asyncio.run_coroutine_threadsafe(
            get_channel_layer().group_send(group, message), self.loop
        )
        sent.result(timeout=PUBLISH_SECONDS)


_publisher = Publisher()


class NotifyListener:
    """One LISTEN connection per web process and event loop, started by the first socket.

    `watch()` returns once the listener is listening, so a socket that then reads the log
    cannot miss an event stored in between. After a lost connection, every watched run is woken
    once the listener is back, for whatever was stored while it was away.
    """

    def __init__(self) -> None:
        self.watched: Counter[int] = Counter()
        self.listening = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def watch(self, run_id: int) -> None:
        self.watched[run_id] += 1
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.listen(), name="loop-notify-listener")
        await self.listening.wait()

    def unwatch(self, run_id: int) -> None:
        self.watched[run_id] -= 1
        if self.watched[run_id] <= 0:
            del self.watched[run_id]

    async def listen(self) -> None:
        layer = get_channel_layer()
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    **await sync_to_async(connection_params)(), autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await connection.execute(f"LISTEN {DELTA_CHANNEL}")
                    self.listening.set()
                    for run_id in list(self.watched):
                        await layer.group_send(group_for(run_id), wake_up(run_id, 0))
                    async for note in connection.notifies():
                        message = heard(note.channel, note.payload)
                        if message["run"] in self.watched:
                            await layer.group_send(group_for(message["run"]), message)
            except (psycopg.Error, OSError) as error:
                self.listening.clear()
                logger.warning("Listening for run events failed (%s); retrying", error)
                await asyncio.sleep(RECONNECT_SECONDS)


def heard(channel: str, payload: str) -> dict[str, Any]:
    """The channel-layer message for a notification: a wake-up, or a delta."""
    if channel == DELTA_CHANNEL:
        sent = json.loads(payload)
        return delta(sent["run"], sent["step"], sent["text"])
    run_id, seq = map(int, payload.split(":"))
    return wake_up(run_id, seq)


def connection_params() -> dict[str, Any]:
    """The Django database's connection parameters, for a plain psycopg connection."""
    connection = connections["default"]
    connection.ensure_connection()  # the embedded server starts on demand
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(django_only, None)
    return params


_listeners: dict[asyncio.AbstractEventLoop, NotifyListener] = {}


async def stop_listening() -> None:
    """Stop this event loop's listener, closing its connection."""
    stopping = _listeners.pop(asyncio.get_running_loop(), None)
    if stopping is not None and stopping.task is not None:
        stopping.task.cancel()
        await asyncio.gather(stopping.task, return_exceptions=True)


def listener() -> NotifyListener:
    """This event loop's listener (tests run each in a loop of its own)."""
    loop = asyncio.get_running_loop()
    for old in [old for old in _listeners if old.is_closed()]:
        del _listeners[old]
    return _listeners.setdefault(loop, NotifyListener())
