"""The page's websocket: pushes each event of the runs it watches, as HTML the page swaps in.

The page asks to watch a run with {"watch": RUN, "after": SEQ}, SEQ being the last event it has.
The socket joins the run's group (only for a run of its user), sends what the page lacks from the
event log, then whatever a wake-up (agent/bus.py) says is new, always by seq from the log: a
reconnecting page gets no gap and no duplicate. Every read of the log re-checks ownership.
"""

import asyncio
import html
import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from agent import bus
from agent.models import AgentRun, Conversation
from agent.services import runs_for
from chat.rendering import card_for, render_card, status_label

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1024
MAX_WATCHED_RUNS = 50
CLOSE_TOO_BIG = 1009
CLOSE_POLICY = 1008
CLOSE_NOT_FOUND = 4404
ALL_STEPS = 2**31


class RunConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.sent: dict[int, int] = {}  # run id -> last seq sent
        self.replied: dict[int, int] = {}  # run id -> last step whose stored reply was sent
        self.streaming: set[tuple[int, int]] = set()  # (run, step) with a streamed card shown
        if self.user is None or not self.user.is_authenticated or not self.user.is_active:
            await self.close()
            return
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for run_id in getattr(self, "sent", {}):
            await self.channel_layer.group_discard(bus.group_for(run_id), self.channel_name)
            if bus.notifies():
                bus.listener().unwatch(run_id)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else (bytes_data or b"").decode(errors="replace")
        if len(raw) > MAX_MESSAGE_CHARS:
            await self.close(code=CLOSE_TOO_BIG)
            return
        try:
            message = json.loads(raw)
            run_id, after = int(message["watch"]), int(message.get("after") or 0)
        except (ValueError, TypeError, KeyError):
            await self.close(code=CLOSE_POLICY)
            return
        if not await self.owns(run_id):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.watch(run_id, max(after, 0))

    @database_sync_to_async
    def owns(self, run_id: int) -> bool:
        return runs_for(self.user).filter(pk=run_id).exists()

    async def watch(self, run_id: int, after: int) -> None:
        if run_id in self.sent:
            self.sent[run_id] = max(self.sent[run_id], after)
        else:
            if len(self.sent) >= MAX_WATCHED_RUNS:
                await self.close(code=CLOSE_POLICY)
                return
            self.sent[run_id] = after
            # Join first, then read the log: an event stored after the read wakes us.
            await self.channel_layer.group_add(bus.group_for(run_id), self.channel_name)
            if bus.notifies():
                await bus.listener().watch(run_id)
        await self.catch_up(run_id, acknowledge=True)

    async def run_delta(self, message: dict[str, Any]) -> None:
        """A piece of a reply being written: shown in a card of its own until the stored reply
        arrives and takes its place. Nothing is stored, so a page loaded later never shows it."""
        run_id, step = message["run"], message["step"]
        if run_id not in self.sent or step <= self.replied.get(run_id, 0):
            return
        text = html.escape(message["text"])
        if (run_id, step) in self.streaming:
            await self.send(
                text_data=f'<span id="stream-{run_id}-{step}-text" hx-swap-oob="beforeend">'
                f"{text}</span>"
            )
            return
        self.streaming.add((run_id, step))
        card = (
            f'<article class="card streaming" id="stream-{run_id}-{step}" aria-busy="true">'
            f'<div class="prose"><p id="stream-{run_id}-{step}-text">{text}</p></div></article>'
        )
        await self.send(text_data=steps(run_id, card))

    async def run_event(self, message: dict[str, Any]) -> None:
        """A wake-up: event `seq` of the run is stored."""
        run_id = message["run"]
        if run_id in self.sent and (message["seq"] == 0 or message["seq"] > self.sent[run_id]):
            await self.catch_up(run_id, wanted=message["seq"])

    async def catch_up(self, run_id: int, *, wanted: int = 0, acknowledge: bool = False) -> None:
        """Send what the page lacks (at least up to event `wanted`); with `acknowledge`, send the
        run's seq marker even when nothing is new, so the page knows it is watching."""
        fragment, last, replied = await unsent(self.user, run_id, self.sent[run_id])
        if last < wanted:  # a shared read that began before event `wanted` was stored
            fragment, last, replied = await read_unsent(self.user, run_id, self.sent[run_id])
        if not fragment or (last <= self.sent[run_id] and not acknowledge):
            return
        self.sent[run_id] = last
        self.replied[run_id] = max(self.replied.get(run_id, 0), replied)
        # A streamed card gives way to the stored reply of its step.
        done = {key for key in self.streaming if key[0] == run_id and key[1] <= replied}
        self.streaming -= done
        removals = "".join(
            f'<div id="stream-{run}-{step}" hx-swap-oob="delete"></div>' for run, step in done
        )
        await self.send(text_data=fragment + removals)


# Reads of the log in progress in this process. The sockets of one user watching one run wake
# together and want the same events: one read and one rendering serve them all.
Unsent = tuple[str, int, int]  # fragments, last seq, last step settled
_reading: dict[tuple[int, int, int], asyncio.Future[Unsent]] = {}


async def unsent(user: Any, run_id: int, after: int) -> Unsent:
    key = (user.pk, run_id, after)
    reading = _reading.get(key)
    if reading is None:
        reading = asyncio.ensure_future(read_unsent(user, run_id, after))
        _reading[key] = reading
        reading.add_done_callback(lambda _: _reading.pop(key, None))
    return await asyncio.shield(reading)


@database_sync_to_async
def read_unsent(user: Any, run_id: int, after: int) -> Unsent:
    """The run's events after `after` as out-of-band fragments (or only its seq marker), the
    last seq among them and the last step whose reply is stored. Nothing if the run is no longer
    the user's to see (say, its conversation was deleted)."""
    run = runs_for(user).filter(pk=run_id).first()
    if run is None:
        return "", after, 0
    events = list(
        run.events.filter(seq__gt=after).order_by("seq").values_list("seq", "kind", "data")
    )
    if not events:
        marker = {"run": run, "seq": after, "finished": run.is_finished, "oob": True}
        return render_to_string("chat/cards.html#seq_marker", marker), after, 0
    return fragments(run, events), events[-1][0], settled(events)


def settled(events: list[tuple[int, str, dict[str, Any]]]) -> int:
    """The last step whose streamed text a stored card now shows: a reply that called tools
    shows in its own card; the final reply shows when the run's end arrives."""
    if any(kind == "run_finished" for _, kind, _ in events):
        return ALL_STEPS
    replies = [data for _, kind, data in events if kind == "model_replied" and data["tool_calls"]]
    return max((data["step"] for data in replies), default=0)


def fragments(run: AgentRun, events: list[tuple[int, str, dict[str, Any]]]) -> str:
    """Out-of-band swaps: new cards at the end of the run's steps; a card with the id of one
    already there replaces it; then the run's status, its last seq, and the sidebar's icon."""
    parts: list[str] = []
    for seq, kind, data in events:
        card = card_for(run.pk, seq, kind, data)
        if card is not None:
            parts.append(render_card(card) if card.replaces else steps(run.pk, render_card(card)))
    kinds = {kind for _, kind, _ in events}
    finished = "run_finished" in kinds
    context = {"run": run, "seq": events[-1][0], "finished": finished, "oob": True}
    parts.append(render_to_string("chat/cards.html#seq_marker", context))
    if kinds & {"run_started", "run_finished"}:
        parts.append(render_to_string("chat/cards.html#run_status", context))
        if run.conversation_id is not None:
            parts.append(sidebar_status(run.conversation_id))
    return "".join(parts)


def steps(run_id: int, card: str) -> str:
    return f'<div id="run-{run_id}-steps" hx-swap-oob="beforeend">{card}</div>'


def sidebar_status(conversation_id: int) -> str:
    conversation = Conversation.objects.get(pk=conversation_id)
    last = conversation.runs.order_by("-pk").values_list("status", flat=True).first()
    conversation.last_status = last
    conversation.status = status_label(last)
    return render_to_string(
        "chat/cards.html#conversation_status", {"conversation": conversation, "oob": True}
    )
