"""How a persisted event, and the text a model is writing, reach the pages watching its run.

A run's events are appended to its log by the worker (agent/recorder.py). Each page's socket
(chat/consumers.py) joins its run's channel-layer group; a message to that group says only "run R
has event S", and the socket reads what it has not sent yet from the log. So a message lost, late
or doubled never loses or doubles a step: the log is the truth, the message a wake-up call. Over
Redis the message also carries the events it announces, as they were stored (it is sent only
once they are): a socket that has every event before them sends them at once, any other reads
the log.

What carries the messages is one `Transport`, chosen once from the settings (`transport()`):

- No REDIS_URL, `NotifyTransport`: the worker's INSERT of the event also runs `pg_notify` in the
  same statement, so the notification is delivered only once the event is durable. Each web
  process keeps one connection LISTENing (`NotifyListener`) and passes the wake-up to its
  in-memory channel layer.
- REDIS_URL set, `RedisTransport`: the worker sends the message through channels_redis right
  after the event is stored; a socket's group is all it listens on. Slower than NOTIFY here, it
  is for a PostgreSQL behind a transaction-pooling proxy (where LISTEN cannot work) and for many
  web processes.

The transport owns both ends of its payloads and their size limits; the worker's side goes
through the `Publisher`, the web's through a `Listener`.

Publishing never holds up a run. The run's thread hands each message to the process's one
`Publisher`, whose thread sends it within SEND_SECONDS; what cannot be sent (a Redis that is down
or silent, a full queue) is dropped and counted, the log says once per outage what failed, and
each run's latest wake-up is sent again when the transport is back.

Streamed text is coalesced: a reply's first piece goes out at once, what follows at most every
STREAM_SECONDS or as soon as a message's worth has gathered, and the rest when the reply ends; so
a long answer is a few messages, in order, with no gap.

Group names carry the site's prefix (LOOP_CHANNEL_PREFIX, else the database's name), so two sites
on one Redis database do not hear each other.
"""

import asyncio
import atexit
import json
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import psycopg
from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import DatabaseError, connections
from django.dispatch import receiver

from agent.connections import release_connection

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "loop_run_events"
DELTA_CHANNEL = "loop_run_deltas"
RECONNECT_SECONDS = 1.0

SEND_SECONDS = 0.5  # a send the transport has not taken by then is dropped
RETRY_SECONDS = 1.0  # after a failed send, what comes this soon is dropped untried
QUEUE_LIMIT = 1000  # messages waiting for the transport; beyond it they are dropped
EXIT_SECONDS = 1.0  # how long a process that exits waits for what it has queued
STREAM_SECONDS = 0.05  # streamed text gathers this long between two messages of one reply
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
NOTIFY_PAYLOAD_BYTES = 7900
# The most event data (as JSON) one wake-up carries over Redis; beyond it, the socket reads the
# log. A step's events are a few kB; a tool's result is capped at 16,000 characters.
PUSHED_EVENTS_CHARS = 48_000
# A streamed message over Redis becomes one websocket frame, escaped as HTML (up to 6 bytes a
# character): well under daphne's 1 MiB.
REDIS_DELTA_CHARS = 64_000

# Channels accepts group names of these characters, shorter than 100.
NOT_IN_GROUP_NAME = re.compile(r"[^A-Za-z0-9_.-]")
PREFIX_CHARS = 64


def site_prefix() -> str:
    """This site's part of every group name: LOOP_CHANNEL_PREFIX, or its database's name (read
    at use, so a test database or a worker pointed at it by DATABASE_URL agree)."""
    prefix = settings.LOOP_CHANNEL_PREFIX or settings.DATABASES["default"]["NAME"]
    return NOT_IN_GROUP_NAME.sub("_", str(prefix))[:PREFIX_CHARS]


def group_for(run_id: int) -> str:
    return f"{site_prefix()}.run-{run_id}"


# An event as a wake-up carries it: its seq, kind and data, as the log stores them.
EventRow = tuple[int, str, dict[str, Any]]


def wake_up(run_id: int, seq: int, events: Sequence[EventRow] = ()) -> dict[str, Any]:
    """The message that event `seq` of the run is stored; with `events` (those it announces,
    when they are small), a socket that has every event before them sends them without reading
    the log. Any other socket (one behind, one that missed a message) reads the log as ever."""
    message: dict[str, Any] = {"type": "run.event", "run": run_id, "seq": seq}
    if events and sum(len(json.dumps(data)) for _, _, data in events) <= PUSHED_EVENTS_CHARS:
        message["events"] = [[seq, kind, data] for seq, kind, data in events]
    return message


def delta(run_id: int, step: int, text: str, at: int | None = None) -> dict[str, Any]:
    """A piece of the reply to step `step`, the `at` characters before it sent already (None
    from a publisher that did not say): a page that missed what came before knows it did."""
    return {"type": "run.delta", "run": run_id, "step": step, "text": text, "at": at}


def channel_layer() -> BaseChannelLayer:
    """The site's channel layer (CHANNEL_LAYERS always names one)."""
    layer = get_channel_layer()
    if layer is None:
        raise ImproperlyConfigured("CHANNEL_LAYERS names no default layer.")
    return layer


def describe(error: BaseException) -> str:
    """The exception's type and text; a timeout has no text of its own."""
    text = str(error) or f"no answer within {SEND_SECONDS} s"
    return f"{type(error).__name__}: {text}"


class Sender(Protocol):
    """What the publisher's thread sends a message through; made and used by that thread only."""

    def send(self, outgoing: "Outgoing") -> None: ...

    def rest(self) -> None:
        """Nothing streams, or a send failed: let go of what is held for sending."""

    def close(self) -> None: ...


class Listener(Protocol):
    """The web side: what a socket tells of the runs it watches, so their wake-ups reach the
    runs' groups, and whether they do now."""

    async def watch(self, run_id: int) -> None: ...

    def unwatch(self, run_id: int) -> None: ...

    @property
    def listening(self) -> bool: ...


class Transport(ABC):
    """How a run's messages cross from its worker to the web processes, chosen once from the
    settings (`transport()`): publishing on the worker's side, listening on the web's, the
    payloads' both ends and their size limits. The publisher and the listener it uses are
    classes of their own (`Publisher`, `NotifyListener`)."""

    # The most text of a reply one streamed message carries.
    message_chars: int

    @property
    @abstractmethod
    def name(self) -> str:
        """What carries the messages, as an operator would look for it (no credentials)."""

    # --- the worker's side ---

    def event_insert(self, insert: str) -> str:
        """The statement that appends events: `insert`, which returns their run_id and seq."""
        return insert

    def publish(self, run_id: int, seq: int, events: Sequence[EventRow] = ()) -> None:
        """Tell the pages watching the run that event `seq` is stored, with the `events` the
        message announces (see wake_up)."""
        _publisher.put(Outgoing(run_id, group_for(run_id), wake_up(run_id, seq, events)))

    def stream(self, run_id: int, step: int, text: str) -> None:
        _publisher.stream(run_id, step, text, self.message_chars)

    def finish(self, run_id: int) -> None:
        _publisher.finish(run_id)

    @abstractmethod
    def sender(self) -> Sender:
        """A sender for the publisher's thread."""

    # --- the web's side ---

    @abstractmethod
    def listener(self) -> Listener:
        """This process's listener, for the running event loop."""


class NotifyTransport(Transport):
    """PostgreSQL NOTIFY: an event's own INSERT sends its wake-up, "run_id:seq" on
    NOTIFY_CHANNEL, so it is delivered once the event is durable; a reply's text goes as JSON
    on DELTA_CHANNEL. Each web process LISTENs on one connection per event loop."""

    message_chars = NOTIFY_PAYLOAD_BYTES
    name = "PostgreSQL NOTIFY"

    def event_insert(self, insert: str) -> str:
        # The payload's writing end; `heard` is its reading end. The channel is ours, not input.
        return (
            f"WITH event AS ({insert}) "  # noqa: S608 (ours)
            f"SELECT pg_notify('{NOTIFY_CHANNEL}', run_id || ':' || seq) FROM event"
        )

    def publish(self, run_id: int, seq: int, events: Sequence[EventRow] = ()) -> None:
        """Nothing to send: the event's INSERT carried its wake-up."""

    def finish(self, run_id: int) -> None:
        # The event's own INSERT carries its wake-up: let the reply's text go first (PostgreSQL
        # is the run's own database, so this waits on nothing new).
        _publisher.finish(run_id, wait=SEND_SECONDS)

    def sender(self) -> Sender:
        return NotifySender()

    def listener(self) -> Listener:
        return listener()


class RedisTransport(Transport):
    """channels_redis: the worker sends each wake-up right after the event is stored; a web
    process's sockets hear them through their groups, with nothing more to listen on."""

    message_chars = REDIS_DELTA_CHARS

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def name(self) -> str:
        url = urlsplit(self.url)
        if url.hostname is None:
            return f"Redis at {url.path}"
        return f"Redis at {url.hostname}:{url.port or 6379}{url.path}"

    def sender(self) -> Sender:
        return RedisSender()

    def listener(self) -> Listener:
        return _groups


class GroupListener:
    """Over Redis a socket's group is all it listens on: nothing to watch, always listening."""

    listening = True

    async def watch(self, run_id: int) -> None:
        return None

    def unwatch(self, run_id: int) -> None:
        return None


_groups = GroupListener()
_chosen: Transport | None = None


def choose() -> Transport:
    """The transport the settings name: Redis when REDIS_URL is set, else PostgreSQL NOTIFY."""
    return RedisTransport(settings.REDIS_URL) if settings.REDIS_URL else NotifyTransport()


def transport() -> Transport:
    """This process's transport, chosen once (again only if a test changes REDIS_URL)."""
    global _chosen
    if _chosen is None:
        _chosen = choose()
    return _chosen


@receiver(setting_changed)
def _choose_again(*, setting: str, **kwargs: Any) -> None:
    global _chosen
    if setting == "REDIS_URL":
        _chosen = None


def publish(run_id: int, seq: int, events: Sequence[EventRow] = ()) -> None:
    """Tell the pages watching the run that event `seq` is stored (queued, never waited for),
    with the `events` stored last (their seq, kind and data), which the message may carry."""
    transport().publish(run_id, seq, events)


def publish_delta(run_id: int, step: int, text: str) -> None:
    """A piece of the reply to step `step` as the model writes it; never stored."""
    transport().stream(run_id, step, text)


def finish_deltas(run_id: int) -> None:
    """The run's reply is over: its streamed text not sent yet goes now, ahead of what follows."""
    transport().finish(run_id)


def drain(timeout: float) -> bool:
    """Wait (at most `timeout` seconds) until this process has nothing left to publish."""
    return _publisher.drain(timeout)


@dataclass(frozen=True)
class Outgoing:
    """One message for a run's group."""

    run_id: int
    group: str
    message: dict[str, Any]


@dataclass
class Stream:
    """The text of one reply gathered since its last message."""

    group: str
    size: int  # the most text one message carries (the transport's message_chars)
    text: list[str] = field(default_factory=list)
    chars: int = 0
    due: float = 0.0  # when what has gathered goes out (at once, for a reply's first piece)
    released: int = 0  # characters of the reply queued so far
    broken: bool = False  # a message was dropped: the rest waits for the stored reply

    def take(self) -> str:
        taken = "".join(self.text)
        self.text, self.chars = [], 0
        return taken


@dataclass
class Outage:
    """The transport failing: since when it is tried again, and what failed first."""

    transport: str
    retry_at: float
    dropped: int = 0


class Publisher:
    """Sends the messages of every run in this process from one thread of its own, so a slow or
    absent transport costs a run nothing. The queue is bounded; a send is bounded by SEND_SECONDS;
    after a failure the transport is tried again every RETRY_SECONDS, dropping what comes between.
    """

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.queue: deque[tuple[int, Outgoing]] = deque()  # (ticket, message), oldest first
        self.streams: dict[tuple[int, int], Stream] = {}  # (run, step) -> its gathered text
        self.missed: dict[int, Outgoing] = {}  # run -> its latest wake-up dropped in an outage
        self.tickets = 0  # messages queued so far
        self.handled = 0  # the ticket of the last message sent or dropped by the thread
        self.sending: Outgoing | None = None
        self.dropped = 0
        self.outage: Outage | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.sender: Sender | None = None
        self.sender_for: Transport | None = None  # the transport `sender` was made for

    # --- the run's side: never waits on the transport ---

    def put(self, outgoing: Outgoing) -> int:
        """Queue a message; its ticket, or 0 if the queue is full and it is dropped."""
        with self.changed:
            self.start()
            if len(self.queue) >= QUEUE_LIMIT:
                self.drop(outgoing)
                return 0
            self.tickets += 1
            self.queue.append((self.tickets, outgoing))
            self.changed.notify_all()
            return self.tickets

    def stream(self, run_id: int, step: int, text: str, size: int) -> None:
        """Gather a piece of a reply into messages of at most `size` characters."""
        with self.changed:
            stream = self.streams.setdefault((run_id, step), Stream(group_for(run_id), size))
            if stream.broken or not text:
                return
            stream.text.append(text)
            stream.chars += len(text)
            if time.monotonic() >= stream.due:
                self.release(run_id, step, stream)  # queued: the thread is woken
            elif stream.chars >= stream.size:  # full messages go; the rest waits its time
                self.release(run_id, step, stream, whole=False)
            elif stream.chars == len(text):  # the first text to gather: the thread sleeps
                self.changed.notify_all()  # until it is due, not until the next message

    def finish(self, run_id: int, *, wait: float = 0.0) -> None:
        """Queue what the run's replies gathered; then wait (at most `wait` seconds) until it
        is sent."""
        with self.changed:
            last = 0
            for run, step in [key for key in self.streams if key[0] == run_id]:
                last = self.release(run, step, self.streams.pop((run, step))) or last
            if last and wait:
                self.changed.wait_for(lambda: self.handled >= last, wait)

    def release(self, run_id: int, step: int, stream: Stream, *, whole: bool = True) -> int:
        """Queue the stream's gathered text (`whole`), or only its full messages; the last
        ticket (0 if nothing was queued)."""
        size, text, last = stream.size, stream.take(), 0
        if whole:
            stream.due = time.monotonic() + STREAM_SECONDS
        else:
            cut = len(text) - len(text) % size
            text, rest = text[:cut], text[cut:]
            stream.text, stream.chars = ([rest] if rest else []), len(rest)
        if stream.broken:
            return 0
        for start in range(0, len(text), size):
            piece = text[start : start + size]
            message = delta(run_id, step, piece, stream.released)
            stream.released += len(piece)
            last = self.put(Outgoing(run_id, stream.group, message))
            if not last:
                stream.broken = True
                return 0
        return last

    def drain(self, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(
                lambda: not self.queue and self.sending is None and not self.gathered(), timeout
            )

    def gathered(self) -> bool:
        return any(stream.text for stream in self.streams.values())

    # --- the publisher's thread ---

    def start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.stopping = False
            self.thread = threading.Thread(target=self.work, name="loop-publisher", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        if self.thread is not None:
            self.thread.join()

    def work(self) -> None:
        while (item := self.next()) is not None:
            ticket, outgoing = item
            self.send(outgoing)
            with self.changed:
                self.handled, self.sending = max(self.handled, ticket), None
                self.changed.notify_all()
        if self.sender is not None:
            self.sender.close()

    def next(self) -> tuple[int, Outgoing] | None:
        """The next message to send, once there is one; None when stopping."""
        with self.changed:
            while not self.stopping:
                now = time.monotonic()
                for (run_id, step), stream in self.streams.items():
                    if stream.text and stream.due <= now:
                        self.release(run_id, step, stream)
                if self.outage is not None and self.missed and self.outage.retry_at <= now:
                    self.queue.extend((0, wake) for wake in self.missed.values())
                    self.missed.clear()
                if self.queue:
                    self.sending = self.queue[0][1]
                    return self.queue.popleft()
                if not self.streams and self.sender is not None:  # between replies: no
                    self.sender.rest()  # connection is held for nothing
                self.changed.wait(self.sleep(now))
        return None

    def sleep(self, now: float) -> float | None:
        """Until the next stream is due, or the transport is to be tried again."""
        due = [stream.due for stream in self.streams.values() if stream.text]
        if self.outage is not None and self.missed:
            due.append(self.outage.retry_at)
        return max(0.0, min(due) - now) if due else None

    def send(self, outgoing: Outgoing) -> None:
        if self.outage is not None and time.monotonic() < self.outage.retry_at:
            with self.changed:
                self.drop(outgoing)
            return
        try:
            self.sender_of(transport()).send(outgoing)
        except Exception as error:  # any failure of the transport: dropped, logged, run goes on
            with self.changed:
                self.fail(outgoing, error)
        else:
            with self.changed:
                self.recover()

    def sender_of(self, chosen: Transport) -> Sender:
        """The thread's sender for the chosen transport (made anew only if a test changed it)."""
        if self.sender is None or self.sender_for is not chosen:
            if self.sender is not None:
                self.sender.close()
            self.sender, self.sender_for = chosen.sender(), chosen
        return self.sender

    def drop(self, outgoing: Outgoing) -> None:
        self.dropped += 1
        if self.outage is not None:
            self.outage.dropped += 1
        if outgoing.message["type"] == "run.event":
            self.missed[outgoing.run_id] = outgoing

    def fail(self, outgoing: Outgoing, error: Exception) -> None:
        retry_at = time.monotonic() + RETRY_SECONDS
        if self.outage is None:
            self.outage = Outage(transport().name, retry_at)
            logger.warning(
                "Publishing run events to %s failed (%s); messages are dropped while it fails "
                "(pages catch up from the event log), and it is tried again every %s s",
                self.outage.transport,
                describe(error),
                RETRY_SECONDS,
            )
        self.outage.retry_at = retry_at
        self.drop(outgoing)
        if self.sender is not None:
            self.sender.rest()  # a connection that failed is not trusted again

    def recover(self) -> None:
        if self.outage is None:
            return
        logger.info(
            "Publishing run events to %s works again; %s messages were dropped",
            self.outage.transport,
            self.outage.dropped,
        )
        self.outage = None
        self.queue.extend((0, wake) for wake in self.missed.values())
        self.missed.clear()


class RedisSender:
    """group_send on an event loop of the publisher's thread, kept so the channel layer's Redis
    connections are made once, not once per message."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def send(self, outgoing: Outgoing) -> None:
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        sending = channel_layer().group_send(outgoing.group, outgoing.message)
        self.loop.run_until_complete(asyncio.wait_for(sending, SEND_SECONDS))

    def rest(self) -> None:
        return None  # channels_redis keeps its connections on the loop: kept for what follows

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
            self.loop = None


class NotifySender:
    """pg_notify on the publisher thread's own database connection, held only while replies
    stream. A message too big for one NOTIFY goes as several."""

    def __init__(self) -> None:
        self.connected = False

    def send(self, outgoing: Outgoing) -> None:
        message = outgoing.message
        payloads = notify_payloads(message["run"], message["step"], message["text"], message["at"])
        self.connected = True
        with connections["default"].cursor() as cursor:
            for payload in payloads:
                cursor.execute("SELECT pg_notify(%s, %s)", [DELTA_CHANNEL, payload])

    def rest(self) -> None:
        if self.connected:
            connections["default"].close()
            self.connected = False

    def close(self) -> None:
        self.rest()


def notify_payloads(run_id: int, step: int, text: str, at: int | None = 0) -> list[str]:
    """The text, the `at` characters of its reply before it sent already, as NOTIFY payloads
    under PostgreSQL's limit, each as long as fits (escaping makes some characters longer, so
    the cut is searched for)."""
    payloads = []
    while text:
        fits, over = 1, min(len(text), NOTIFY_PAYLOAD_BYTES) + 1
        while over - fits > 1:  # the longest head of the text whose payload fits
            middle = (fits + over) // 2
            if len(payload(run_id, step, text[:middle], at)) <= NOTIFY_PAYLOAD_BYTES:
                fits = middle
            else:
                over = middle
        payloads.append(payload(run_id, step, text[:fits], at))
        text = text[fits:]
        at = None if at is None else at + fits
    return payloads


def payload(run_id: int, step: int, text: str, at: int | None = 0) -> str:
    """A delta as a NOTIFY payload: JSON in ASCII, so its length is its size in bytes."""
    return json.dumps({"run": run_id, "step": step, "text": text, "at": at})


_publisher = Publisher()


@atexit.register
def _publish_the_rest() -> None:
    """A process that exits (a worker stopping, `runagent` done) sends what it queued, briefly."""
    _publisher.drain(EXIT_SECONDS)


class NotifyListener:
    """One LISTEN connection per web process and event loop, started by the first socket.

    `watch()` returns once the listener is listening, so a socket that then reads the log
    cannot miss an event stored in between. After a lost connection, every watched run is woken
    once the listener is back, for whatever was stored while it was away.
    """

    def __init__(self) -> None:
        self.watched: Counter[int] = Counter()
        self.connected = asyncio.Event()  # LISTENing now
        self.task: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        return self.connected.is_set()

    async def watch(self, run_id: int) -> None:
        self.watched[run_id] += 1
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.listen(), name="loop-notify-listener")
        await self.connected.wait()

    def unwatch(self, run_id: int) -> None:
        self.watched[run_id] -= 1
        if self.watched[run_id] <= 0:
            del self.watched[run_id]

    async def listen(self) -> None:
        layer = channel_layer()
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    **await sync_to_async(connection_params)(), autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await connection.execute(f"LISTEN {DELTA_CHANNEL}")
                    self.connected.set()
                    for run_id in list(self.watched):
                        await layer.group_send(group_for(run_id), wake_up(run_id, 0))
                    async for note in connection.notifies():
                        message = heard(note.channel, note.payload)
                        if message["run"] in self.watched:
                            await layer.group_send(group_for(message["run"]), message)
            except (psycopg.Error, DatabaseError, OSError) as error:
                self.connected.clear()
                logger.warning("Listening for run events failed (%s); retrying", describe(error))
                await asyncio.sleep(RECONNECT_SECONDS)


def heard(channel: str, payload: str) -> dict[str, Any]:
    """The channel-layer message for a notification: a wake-up (as NotifyTransport.event_insert
    writes it), or a delta (as notify_payloads does)."""
    if channel == DELTA_CHANNEL:
        sent = json.loads(payload)
        return delta(sent["run"], sent["step"], sent["text"], sent.get("at"))
    run_id, seq = map(int, payload.split(":"))
    return wake_up(run_id, seq)


def connection_params() -> dict[str, Any]:
    """The Django database's connection parameters, for a plain psycopg connection. Connecting
    through Django first starts the embedded server on demand, and starts it again after it was
    killed; so the listener's connection, made once the server is gone, is checked first."""
    connection = connections["default"]
    connection.close_if_unusable_or_obsolete()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    params = connection.get_connection_params()
    release_connection()  # only its parameters were wanted
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
