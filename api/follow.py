"""Following a run from a program: its stored events in order from a seq on, then each as it is
stored, with the reply's text as the model writes it, as the page's socket gets them
(chat/consumers.py): join the run's group first, then read the log, so nothing stored in between
is missed; every read is by seq from the log, so a reconnect from the last seq it had gets no gap
and no duplicate. The SSE streams (api/events.py) and the OpenAI-compatible endpoint
(api/openai_compat.py) read a run through `follow`.

A wake-up that carries its events (agent/bus.py) is used as it is when it follows what was read
with no gap; anything else reads the log. A quiet run is read again every LOOP_API_POLL_SECONDS
anyway (a wake-up lost with a channel layer's hiccup costs at most that long), and each such pause
yields a `Quiet`, for the stream to keep its connection alive and re-check its key; so does each
pause while the channel layer fails (else a stream could go on for ever on a revoked key)."""

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User

from agent import bus, selectors
from agent.models import FINISHED
from agent.selectors import Logged
from core.events import loaded

logger = logging.getLogger(__name__)

LAYER_SECONDS = 2.0  # the longest one channel-layer call may take
EVENTS_PER_READ = 100


@dataclass(frozen=True)
class Delta:
    """A piece of the reply to model turn `step`, `at` characters after its start (None: the
    publisher did not say). Never stored: a reconnect gets the stored reply instead."""

    step: int
    text: str
    at: int | None


@dataclass(frozen=True)
class Quiet:
    """Nothing happened for LOOP_API_POLL_SECONDS (or the channel layer failed)."""


@dataclass(frozen=True)
class Ended:
    """The run is finished (or gone: deleted, or not the person's any more) and every event of
    it was yielded; `status` is its last (empty when gone)."""

    status: str


Followed = Logged | Delta | Quiet | Ended


@database_sync_to_async
def read(person: User, run_id: int, after: int) -> tuple[list[Logged], str | None]:
    """The next events after `after` of the person's run, and its status when there were none
    (None: no such run of theirs). A run seen finished is read once more: its last events and
    its end may have been stored between the two reads (its end and its status are stored
    together, so nothing comes after a status seen finished)."""
    events = selectors.events_of_run_of(person, run_id, after=after, limit=EVENTS_PER_READ)
    if events:
        return events, ""
    run = selectors.runs_for(person).filter(pk=run_id).values_list("status", flat=True).first()
    if run in FINISHED:
        events = selectors.events_of_run_of(person, run_id, after=after, limit=EVENTS_PER_READ)
        if events:
            return events, ""
    return [], run


def carried(message: dict[str, Any], after: int) -> list[Logged] | None:
    """The events a wake-up carries, if they follow `after` with no gap; else None."""
    rows = [row for row in message.get("events") or () if row[0] > after]
    if not rows or rows[0][0] != after + 1:
        return None
    return [Logged(seq, loaded(kind, data)) for seq, kind, data in rows]


class Follower:
    """One program's view of one run: its channel, joined to the run's group while it lives."""

    def __init__(self, person: User, run_id: int, after: int) -> None:
        self.person = person
        self.run_id = run_id
        self.after = after
        self.layer = bus.channel_layer()
        self.listener = bus.transport().listener()
        self.channel = ""

    async def __aenter__(self) -> "Follower":
        self.channel = await self.layer.new_channel()
        await self.bounded(self.layer.group_add(bus.group_for(self.run_id), self.channel))
        await self.bounded(self.listener.watch(self.run_id))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.listener.unwatch(self.run_id)
        await self.bounded(self.layer.group_discard(bus.group_for(self.run_id), self.channel))

    async def bounded(self, call: Any) -> None:
        """A channel-layer call that fails or hangs leaves the follower polling the log."""
        try:
            await asyncio.wait_for(call, LAYER_SECONDS)
        except Exception as error:  # any failure of the layer: the log is read every poll
            logger.warning("An API stream's channel layer failed (%s); polling the log", error)

    async def events(self) -> AsyncIterator[Followed]:
        while True:
            events, status = await read(self.person, self.run_id, self.after)
            if events:
                for logged in events:
                    self.after = logged.seq
                    yield logged
                continue
            if status is None or status in FINISHED:
                yield Ended(status or "")
                return
            async for woken in self.wait():
                yield woken

    async def wait(self) -> AsyncIterator[Followed]:
        """Until a wake-up says an event was stored (its events yielded when it carries them),
        yielding the reply's pieces meanwhile; a Quiet after LOOP_API_POLL_SECONDS of nothing,
        or after a pause when the layer fails."""
        while True:
            try:
                message = await asyncio.wait_for(
                    self.layer.receive(self.channel), settings.LOOP_API_POLL_SECONDS
                )
            except TimeoutError:
                yield Quiet()
                return
            except Exception as error:  # the layer failed: read the log after a pause
                logger.warning("An API stream could not hear its run (%s); polling", error)
                await asyncio.sleep(min(LAYER_SECONDS, settings.LOOP_API_POLL_SECONDS))
                yield Quiet()
                return
            if message.get("run") != self.run_id:
                continue
            if message.get("type") == "run.delta":
                yield Delta(message["step"], message["text"], message.get("at"))
                continue
            events = carried(message, self.after)
            for logged in events or ():
                self.after = logged.seq
                yield logged
            return


async def follow(person: User, run_id: int, after: int = 0) -> AsyncGenerator[Followed, None]:
    """The person's run's events after seq `after`, then each as it is stored, the reply's
    pieces between them, a Quiet now and then, and an Ended once the run is finished (or not
    theirs) with nothing more to read. The caller checks first that the run is theirs."""
    async with Follower(person, run_id, after) as follower:
        async for followed in follower.events():
            yield followed
