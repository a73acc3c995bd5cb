"""The page's websocket: pushes each event of the runs it watches, as HTML the page swaps in.

The page asks to watch a run with {"watch": RUN, "after": SEQ}, SEQ being the last event it has.
The socket joins the run's group (only for a run of its user), sends what the page lacks from the
event log, then whatever a wake-up (agent/bus.py) says is new, always by seq from the log: a
reconnecting page gets no gap and no duplicate. Every read of the log re-checks ownership.

Its rules (docs/chat.md, "The socket's rules"): a message is validated whole, and a bad one
closes the socket with a code of `Close`; before acting on a message or pushing an event, the
socket re-checks (at most every SESSION_CHECK_SECONDS) that its session is valid and its user
active, and a logout closes the sockets of that session at once. What the page lacks is read
from the log and framed by chat/stream.py. A channel layer that fails or hangs (Redis down) never
closes the socket: every call to it is bounded, the page is told live updates are delayed, and
the socket reads the log every few seconds until the layer answers again.
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import async_to_sync
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.signals import user_logged_out
from django.db import InterfaceError, OperationalError

from agent import bus
from agent.connections import database_unreachable
from chat.rendering import draw, streamed_removal, streamed_text, streaming_card
from chat.stream import ALL_STEPS, Unsent, pushed, read_unsent, unsent
from chat.texts import SHORT_TEXT_CHARS
from notifications import presence

logger = logging.getLogger(__name__)


class Close(IntEnum):
    """The codes the socket closes with (a server may send only 1000 and 3000-4999). Before
    closing, the socket sends the page a status frame saying why (daphne drops close reasons);
    all but UNAVAILABLE are final, and after it the page says itself that it connects again."""

    BAD_MESSAGE = 4400  # not a JSON object {"watch": run id, "after": seq} with valid values
    SIGNED_OUT = 4401  # the session ended (logout, expiry, password change) or user inactive
    NOT_FOUND = 4404  # no run of this user has that id (or it was deleted)
    TOO_BIG = 4413  # a message longer than MAX_MESSAGE_CHARS
    TOO_MANY_RUNS = 4429  # more than MAX_WATCHED_RUNS runs on one socket
    FAILED = 4500  # the socket failed; the log has the traceback
    UNAVAILABLE = 4503  # the database did not answer: the page connects again, and catches up


CLOSE_REASONS = {
    Close.BAD_MESSAGE: "the page sent a message the socket does not take; reload the page",
    Close.SIGNED_OUT: "signed out; reload the page to log in",
    Close.NOT_FOUND: "no such run; reload the page",
    Close.TOO_BIG: "the page sent too long a message; reload the page",
    Close.TOO_MANY_RUNS: "too many runs on one page; reload the page",
    Close.FAILED: "the socket failed; reload the page",
}
MAX_MESSAGE_CHARS = 1024
MAX_WATCHED_RUNS = 50
MAX_RUN_ID = 2**63 - 1  # a bigint primary key
MAX_SEQ = 2**31 - 1  # RunEvent.seq is an integer column
# A logout closes its sockets at once (through the channel layer); this bounds the rest (a session
# deleted or expired, an account deactivated in the console) and is read once per period for all
# of a session's sockets: each read is two queries, which per event of every run was a fifth of
# the web's CPU at a burst.
SESSION_CHECK_SECONDS = 5.0
LAYER_SECONDS = 2.0  # the longest any one channel-layer call may take
RETRY_SECONDS = 3.0  # while the layer fails: how often to try it again and read the log


@dataclass(frozen=True)
class Streamed:
    """What a reply's streamed card shows: its text so far, of which the first `settled`
    characters are drawn once and for all (chat/streamed.py)."""

    text: str
    settled: int


class BadMessage(ValueError):
    def __init__(self, code: Close, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def whole(value: object, low: int, high: int) -> bool:
    """An integer in range (JSON true is not one, nor 1.0 nor 1e400)."""
    return type(value) is int and low <= value <= high


def parse_watch(raw: str) -> tuple[int, int]:
    """The run id and seq of a watch message, or BadMessage saying what is wrong with it."""
    if len(raw) > MAX_MESSAGE_CHARS:
        raise BadMessage(Close.TOO_BIG, f"a message is at most {MAX_MESSAGE_CHARS} characters")
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadMessage(Close.BAD_MESSAGE, "the message is not JSON") from None
    if not isinstance(message, dict) or "watch" not in message or set(message) - {"watch", "after"}:
        raise BadMessage(Close.BAD_MESSAGE, 'send {"watch": RUN, "after": SEQ}, nothing else')
    run_id, after = message["watch"], message.get("after", 0)
    if not whole(run_id, 1, MAX_RUN_ID):
        raise BadMessage(Close.BAD_MESSAGE, "watch must be a run id")
    if not whole(after, 0, MAX_SEQ):
        raise BadMessage(Close.BAD_MESSAGE, f"after must be a whole number from 0 to {MAX_SEQ}")
    return run_id, after


def described(error: BaseException) -> str:
    """An exception's type and text; a timeout has no text of its own."""
    text = str(error) or (
        f"no answer within {LAYER_SECONDS} s" if isinstance(error, TimeoutError) else "no message"
    )
    return f"{type(error).__name__}: {text}"


def signed_in_group(user_id: int) -> str:
    """The group of a user's sockets, told when one of that user's sessions logs out."""
    return f"{bus.site_prefix()}.user-{user_id}"


class RunConsumer(AsyncWebsocketConsumer):
    # The layer's receive starts before connect(), so these few hold from the start.
    closing = False  # set once the socket closes or is closed: it then acts on nothing more
    accepted = False
    degraded = False  # the channel layer failed: live updates wait, the log is read instead
    recovery: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        self.sent: dict[int, int] = {}  # run id -> last seq sent
        self.replied: dict[int, int] = {}  # run id -> last step whose stored reply was sent
        self.streaming: dict[tuple[int, int], Streamed] = {}  # (run, step) -> its card shows
        self.joined: set[str] = set()  # channel-layer groups this socket is in
        # The transport's listener, chosen once (agent.bus), and the runs counted in it.
        self.listener = bus.transport().listener()
        self.listened: list[int] = []
        self.sending = asyncio.Lock()  # one catch-up at a time, or a card could go twice
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close()
            return
        self.user = user  # the signed-in person, as every later step reads it
        seen_signed_in(self.session_key, self.user.pk)
        await self.accept()
        self.accepted = True
        if self.degraded:
            await self.send_status()
            self.start_recovery()
        await self.join(signed_in_group(self.user.pk))

    async def disconnect(self, code: int) -> None:
        """Always runs once the socket is gone, whatever failed before: nothing here raises."""
        self.closing = True
        if self.recovery is not None:
            self.recovery.cancel()
        if self.listened:
            for run_id in self.listened:
                self.listener.unwatch(run_id)
            self.listened = []
        for group in list(self.joined):
            await self.layer(self.channel_layer.group_discard(group, self.channel_name), "leave")
        self.joined.clear()
        if self.accepted:
            with contextlib.suppress(Exception):  # a presence left behind only spares a mail
                await presence.left(self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As channels dispatches, but an unforeseen error closes this socket with a code the
        page understands, and its cleanup still runs, rather than taking daphne's 1011.

        Unlike channels, it does not first close the database connections that are too old in
        the process's one thread for sync code, at every message: every read here already does
        so, in that thread, before and after (database_sync_to_async), and the hop per message
        queued each wake-up of every socket behind the others' reads."""
        if self.closing and message["type"] != "websocket.disconnect":
            return
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        try:
            await handler(message)
        except StopConsumer:
            raise
        except Exception as error:
            await self.failed(message["type"], error)

    async def failed(self, doing: str, error: Exception) -> None:
        """Close on an error nothing else handled. The database not answering (a restart, a
        connection lost, a pool that lent none in time) is no fault of the socket's: the page
        connects again and catches up from the log by seq. Anything else is a bug, and final."""
        if database_unreachable(error):
            logger.warning(
                "A run socket closed: the database did not answer on %s (%s); the page connects "
                "again",
                doing,
                described(error),
            )
            await self.shut(Close.UNAVAILABLE)
            return
        logger.error("The run socket failed on %s", doing, exc_info=error)
        await self.shut(Close.FAILED)

    async def shut(self, code: Close, reason: str = "") -> None:
        if not self.closing:
            if code is not Close.UNAVAILABLE:  # after it, the page says it connects again
                await self.send_status(closed=reason or CLOSE_REASONS[code])
            self.closing = True
            await self.close(code=int(code))  # autobahn takes an int, not an IntEnum

    # The layer's messages, as Loop's receiver gives them (channels' stubs type them as ASGI's).
    @property  # type: ignore[override]
    def channel_receive(self) -> Callable[[], Awaitable[dict[str, Any]]]:
        return self.receive_from_layer

    @channel_receive.setter
    def channel_receive(self, receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        # channels sets this to the layer's own receive, which raises if Redis is down and
        # would end the consumer; the page's socket outlives the layer instead.
        self.layer_receive = receive

    async def receive_from_layer(self) -> dict[str, Any]:
        while True:
            try:
                return await self.layer_receive()
            except Exception as error:  # any failure of the layer: retry later
                await self.layer_failed("receive", error)
                await asyncio.sleep(RETRY_SECONDS)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else (bytes_data or b"").decode(errors="replace")
        try:
            run_id, after = parse_watch(raw)
        except BadMessage as bad:
            logger.info("Closed a run socket (%d): %s", bad.code, bad)
            await self.shut(bad.code, str(bad))
            return
        if not await self.still_signed_in():
            return
        if run_id not in self.sent and len(self.sent) >= MAX_WATCHED_RUNS:
            await self.shut(Close.TOO_MANY_RUNS)
            return
        await self.watch(run_id, after)

    async def still_signed_in(self, *, now: bool = False) -> bool:
        """Whether the session is still valid and its user active (read at most once a
        second for all the session's sockets in this process, or `now`); if not, the socket
        closes."""
        if now:
            valid = await signed_in(self.session_key, self.user.pk)
        else:
            valid = await checked_session(self.session_key, self.user.pk)
        if not valid:
            await self.shut(Close.SIGNED_OUT)
        return valid

    async def user_signed_out(self, message: dict[str, Any]) -> None:
        """One of the user's sessions logged out: this socket's, or maybe another's."""
        if message["session"] == self.session_key:
            await self.shut(Close.SIGNED_OUT)
        else:
            await self.still_signed_in(now=True)

    async def watch(self, run_id: int, after: int) -> None:
        if run_id in self.sent:
            # The page says what it shows: a turn it drew again (a Continue's response) lacks
            # what this socket sent into the turn it replaced.
            if not await self.catch_up(run_id, acknowledge=True, after=after):
                await self.unwatch(run_id)
                await self.shut(Close.NOT_FOUND)
            return
        # Join first, then read the log: an event stored after the read wakes us.
        await self.join(bus.group_for(run_id))
        self.listened.append(run_id)
        await self.layer(self.listener.watch(run_id), "listen")
        self.sent[run_id] = after
        # The first read is the check that the run is the user's (its query checks whose the
        # run is): another's, or one gone, is let go at once. None of its wake-ups was acted
        # on: they wait behind this message. The database not answering here closes the
        # socket (the run unchecked) for the page to connect again and watch it anew.
        async with self.sending:
            found = await self.send_unsent(run_id, wanted=0, acknowledge=True)
        if not found:
            await self.unwatch(run_id)
            await self.shut(Close.NOT_FOUND)
            return
        await presence.watching(self.user.pk, run_id, self.channel_name)

    async def unwatch(self, run_id: int) -> None:
        """Stop watching a run that is not the user's to watch."""
        del self.sent[run_id]
        self.listened.remove(run_id)
        self.listener.unwatch(run_id)
        group = bus.group_for(run_id)
        if group in self.joined:
            self.joined.discard(group)
            await self.layer(self.channel_layer.group_discard(group, self.channel_name), "leave")

    async def join(self, group: str) -> bool:
        joined = await self.layer(self.channel_layer.group_add(group, self.channel_name), "join")
        if joined:
            self.joined.add(group)
        return joined

    async def layer(self, call: Awaitable[object], what: str) -> bool:
        """A channel-layer call, bounded; False (and the page told) if it failed."""
        try:
            await asyncio.wait_for(call, LAYER_SECONDS)
        except Exception as error:  # any failure of the layer: retry later
            await self.layer_failed(what, error)
            return False
        return True

    async def layer_failed(self, what: str, error: BaseException) -> None:
        if not self.degraded:
            logger.warning(
                "A run socket's channel layer failed to %s (%s); live updates wait, the page "
                "reads the event log every %s s until it answers",
                what,
                described(error),
                RETRY_SECONDS,
            )
            self.degraded = True
            await self.send_status()
        self.start_recovery()

    def start_recovery(self) -> None:
        if self.accepted and not self.closing and (self.recovery is None or self.recovery.done()):
            self.recovery = asyncio.create_task(self.recover())

    async def recover(self) -> None:
        """While the layer fails: read the log for the page, and try the layer again (joining
        a group twice is harmless, and proves the layer answers)."""
        try:
            while self.degraded and not self.closing:
                await asyncio.sleep(RETRY_SECONDS)
                wanted = [signed_in_group(self.user.pk), *map(bus.group_for, self.sent)]
                answers = [await self.join(group) for group in wanted]
                listening = self.listener.listening
                for run_id in list(self.sent):
                    await self.catch_up(run_id)
                if all(answers) and listening and not self.closing:
                    self.degraded = False
                    logger.info("A run socket's channel layer answers again")
                    await self.send_status()
        except Exception as error:
            await self.failed("its recovery from the channel layer's failure", error)

    async def send_status(self, *, closed: str = "") -> None:
        """Tell the page's header how its live updates are: live, delayed, or `closed` why."""
        if self.accepted and not self.closing:
            state = "closed" if closed else "degraded" if self.degraded else "live"
            await self.send(text_data=draw("socket_status", state=state, reason=closed))

    async def run_delta(self, message: dict[str, Any]) -> None:
        """A piece of a reply being written: its text so far shown in a card of its own, drawn
        as its answer will be, until the stored reply arrives and takes its place. Nothing is
        stored, so a page loaded later never shows it. A socket that missed what came before a
        piece (it joined mid-reply) draws nothing of that reply: a reply drawn from its middle
        could show its Markdown as text. A card shows at most SHORT_TEXT_CHARS of a text: past
        them, the card is left as it is (and no longer drawn again)."""
        run_id, step = message["run"], message["step"]
        if run_id not in self.sent or step <= self.replied.get(run_id, 0):
            return
        shown = self.streaming.get((run_id, step))
        written = shown.text if shown else ""
        if len(written) >= SHORT_TEXT_CHARS or message.get("at") not in (None, len(written)):
            return
        if not await self.still_signed_in():
            return
        text = (written + message["text"])[:SHORT_TEXT_CHARS]
        if shown is None:
            frame, settled = streaming_card(run_id, step, text)
        else:
            frame, settled = streamed_text(run_id, step, text, shown.settled)
        self.streaming[(run_id, step)] = Streamed(text, settled)
        await self.send(text_data=frame)

    async def run_event(self, message: dict[str, Any]) -> None:
        """A wake-up: event `seq` of the run is stored. The events it carries, if it does, go
        out as they are when the page has every one before them; else the log is read."""
        run_id = message["run"]
        if run_id in self.sent and (message["seq"] == 0 or message["seq"] > self.sent[run_id]):
            if "events" in message and await self.send_pushed(run_id, message["events"]):
                return
            await self.catch_up(run_id, wanted=message["seq"])

    async def send_pushed(self, run_id: int, rows: list[list[Any]]) -> bool:
        """Send the events a wake-up carried; False if they do not follow what was sent."""
        async with self.sending:
            read = pushed(run_id, rows, self.sent[run_id])
            if read is None:
                return False
            if await self.still_signed_in():
                await self.deliver(run_id, read)
            return True

    async def catch_up(
        self, run_id: int, *, wanted: int = 0, acknowledge: bool = False, after: int | None = None
    ) -> bool:
        """Send what the page lacks (at least up to event `wanted`), a page of the log at a
        time, from `after` if the page said what it has; with `acknowledge`, send the run's seq
        marker even when nothing is new, so the page knows it is watching. False if the run is
        no longer the user's to see."""
        async with self.sending:
            if after is not None:  # in the lock: a read under way would move it on again
                self.sent[run_id] = after
            try:
                return await self.send_unsent(run_id, wanted=wanted, acknowledge=acknowledge)
            except (OperationalError, InterfaceError) as error:
                # The database went away mid-read (a restart): the page waits, degraded, and
                # the recovery reads the log again once it answers.
                await self.layer_failed("read the event log", error)
                return True

    async def send_unsent(self, run_id: int, *, wanted: int, acknowledge: bool) -> bool:
        """False if a read found nothing of the run for the user (not theirs, or gone)."""
        while not self.closing and await self.still_signed_in():
            after = self.sent[run_id]
            read = await unsent(self.user, run_id, after)
            if read.last < wanted and not read.more:  # a shared read from before `wanted`
                read = await read_unsent(self.user, run_id, after)
            if not read.frames:
                return False
            if read.last <= after and not acknowledge:
                return True
            await self.deliver(run_id, read)
            if not read.more:
                return True
            acknowledge = False
        return True

    async def deliver(self, run_id: int, read: Unsent) -> None:
        """Send what was read (or pushed) for the run, and settle its streamed cards."""
        self.sent[run_id] = read.last
        # A run that went on again streams its steps again (its old end settled them all);
        # a reply cut off by a lost worker is asked again, so its streamed card goes.
        earlier = 0 if read.resumed else self.replied.get(run_id, 0)
        self.replied[run_id] = max(earlier, read.replied)
        removed = ALL_STEPS if read.resumed else read.replied
        *frames, last = read.frames
        for frame in frames:
            await self.send(text_data=frame)
        await self.send(text_data=last + self.streamed_removals(run_id, removed))

    def streamed_removals(self, run_id: int, replied: int) -> str:
        """A streamed card gives way to the stored reply of its step, in the same frame."""
        done = [key for key in self.streaming if key[0] == run_id and key[1] <= replied]
        for key in done:
            del self.streaming[key]
        return "".join(streamed_removal(run, step) for run, step in done)


# A session's check, shared for SESSION_CHECK_SECONDS by all of its sockets in this process: they
# wake together for the same events, and one read of the session serves them all.
_checks: dict[tuple[str | None, int], asyncio.Future[bool]] = {}


async def checked_session(session_key: str | None, user_id: int) -> bool:
    key = (session_key, user_id)
    check = _checks.get(key)
    if check is None or check.get_loop() is not asyncio.get_running_loop():
        check = asyncio.ensure_future(signed_in(session_key, user_id))
        _checks[key] = check
        asyncio.get_running_loop().call_later(SESSION_CHECK_SECONDS, forget_check, key, check)
    return await asyncio.shield(check)


def seen_signed_in(session_key: str | None, user_id: int) -> None:
    """The socket's authentication read the session and its user just now, by the same rule as
    `signed_in`: that counts as the session's check for the period (two queries fewer a socket)."""
    key = (session_key, user_id)
    if key in _checks:
        return
    loop = asyncio.get_running_loop()
    check: asyncio.Future[bool] = loop.create_future()
    check.set_result(True)
    _checks[key] = check
    loop.call_later(SESSION_CHECK_SECONDS, forget_check, key, check)


def forget_check(key: tuple[str | None, int], check: asyncio.Future[bool]) -> None:
    if _checks.get(key) is check:
        del _checks[key]


@database_sync_to_async
def signed_in(session_key: str | None, user_id: int) -> bool:
    """Whether the session still logs this user in, by the rule of Django's own `get_user`
    (the session exists and is not expired, its password hash holds, the user is active)."""
    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    # get_user reads a request's session only: a stand-in with just that, as no request is here.
    return get_user(SimpleNamespace(session=session)).pk == user_id  # type: ignore[arg-type]


def close_sockets_of(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """On logout, tell the user's sockets (in every process the channel layer reaches); a
    socket it cannot reach finds out at its next message or event by its own check."""
    if user is None or request is None:
        return
    message = {"type": "user.signed_out", "session": request.session.session_key}

    async def tell() -> None:
        await asyncio.wait_for(
            bus.channel_layer().group_send(signed_in_group(user.pk), message), LAYER_SECONDS
        )

    try:
        async_to_sync(tell)()
    except Exception as error:  # a logout never fails for the socket's sake
        logger.warning("Could not tell the sockets of a logout (%s)", described(error))


# Connected where the sockets live: the process serving them imports this module.
user_logged_out.connect(close_sockets_of, dispatch_uid="chat-close-sockets-of-session")
