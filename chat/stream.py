"""What a run's socket sends, read from the event log: the events after the page's last, as
frames of out-of-band HTML fragments of at most FRAME_BYTES, and which steps they settle (whose
streamed text a stored card now shows). The socket (chat/consumers.py) keeps to its protocol;
what it sends, and when a streamed card gives way, is decided here.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from agent import selectors
from agent.models import AgentRun
from agent.selectors import Logged
from approvals.selectors import waiting_calls, waiting_of
from chat.approvals import Asking
from chat.rendering import asking_of, card_for, draw, in_steps, labelled, render_card
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    ModelReplied,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStatus,
    loaded,
)

ALL_STEPS = 2**31
# daphne refuses a message over 1 MiB; a frame stays well under it. Only one card bigger than
# this (bounded by chat/texts.py's SHORT_TEXT_CHARS) goes out alone in a frame of its own.
FRAME_BYTES = 256 * 1024
FRAME_TAIL_BYTES = 8 * 1024  # kept for what ends a frame: seq marker, status, removals
EVENTS_PER_READ = 100  # a catch-up reads the log in pages, never a whole long run at once


# Reads of the log in progress in this process. The sockets of one user watching one run wake
# together and want the same events: one read and one rendering serve them all.
@dataclass(frozen=True)
class Unsent:
    """Frames to send, the last seq in them, the last step settled, whether more follow."""

    frames: list[str]
    last: int
    replied: int
    more: bool
    resumed: bool = False  # the run went on again: what streamed before it is void


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
    """The next page of the run's events after `after` as frames of out-of-band fragments (or
    only its seq marker). Nothing if the run is no longer the user's to see (say, its
    conversation was deleted). Most reads, a step's events, are one query, which checks whose
    the run is; the run's row is read only when the page needs it (no event, or the run started
    or ended), after the events, so it is at least as new as they are; a run found finished
    with no event is read once more."""
    events = selectors.events_of_run_of(user, run_id, after=after, limit=EVENTS_PER_READ + 1)
    run = None if events else selectors.run_of(user, run_id)
    if run is not None and run.is_finished:
        # Its last events and its end may have been stored between the two reads (they are
        # stored together): read again, or the page would take the run as over without them.
        events = selectors.events_of_run_of(user, run_id, after=after, limit=EVENTS_PER_READ + 1)
    more = len(events) > EVENTS_PER_READ
    events = events[:EVENTS_PER_READ]
    if events and lifecycle(events):  # the status, feedback and sidebar's icon are redrawn
        run = selectors.run_of_with_state(user, run_id)
    elif events:
        run = None
    if not events:
        if run is None:
            return Unsent(frames=[], last=after, replied=0, more=False)
        marker = seq_marker(run_id, after, after, finished=run.is_finished)
        frames = [marker + settled_status(user, run)]
        return Unsent(frames=frames, last=after, replied=0, more=False)
    if run is None and lifecycle(events):  # the run went away between the two reads
        return Unsent(frames=[], last=after, replied=0, more=False)
    return Unsent(
        frames=framed(run_id, after, events, more, run, Asking(user)),
        last=events[-1].seq,
        replied=settled(events),
        more=more,
        resumed=resumes(events),
    )


def settled_status(user: Any, run: AgentRun) -> str:
    """The status of a run that ended or waits for its person, redrawn when a read finds nothing
    new: the page drew its turn from the run's row read before its events (the conversation's
    view, a turn sent in), and may show the run working, without its Continue, Edit and
    Regenerate, though its log says it ended or parked."""
    if not (run.is_finished or run.status == RunStatus.AWAITING_APPROVAL):
        return ""
    with_state = selectors.run_of_with_state(user, run.pk)
    return "" if with_state is None else "".join(status_of(with_state))


def pushed(run_id: int, rows: list[list[Any]], after: int) -> Unsent | None:
    """The frames of the events a wake-up carried (chat/consumers.py), when they follow `after`
    with no gap and need nothing else from the database: none of them starts, ends or resumes
    the run (the page's status and the sidebar's icon are read with those). None: the socket
    reads the log instead. Those already sent (a message that came twice) are skipped."""
    events = [Logged(seq, loaded(kind, data)) for seq, kind, data in rows if seq > after]
    if not events or events[0].seq != after + 1 or lifecycle(events):
        return None
    return Unsent(
        frames=framed(run_id, after, events, False, None),
        last=events[-1].seq,
        replied=settled(events),
        more=False,
    )


# What changes the page's status and the sidebar's icon: the run started, ended, went on again,
# or began or stopped waiting for its person's decision (which also changes the title's count).
LIFECYCLE = (RunStarted, RunFinished, RunResumed, ApprovalRequested, ApprovalDecided)


def lifecycle(events: list[Logged]) -> bool:
    """Whether these events change the page's status and the sidebar's icon. A waiting call's
    card also reads what the event does not say (the file a write would replace): it is drawn
    from a read of the log, for its person."""
    return any(isinstance(event, LIFECYCLE) for _, event in events)


def decisions(events: list[Logged]) -> bool:
    """Whether a call began or stopped waiting for its person within these events: the count
    of calls waiting for them changed (a run's end changes it only with its calls' decisions,
    approvals/waiting.py)."""
    return any(isinstance(event, ApprovalRequested | ApprovalDecided) for _, event in events)


def settled(events: list[Logged]) -> int:
    """The last step whose streamed text a stored card now shows: a reply that called tools
    shows in its own card; the final reply shows when the run's end arrives (and a run that
    went on after an end streams again)."""
    if ends(events):
        return ALL_STEPS
    steps = [e.step for _, e in events if isinstance(e, ModelReplied) and e.tool_calls]
    return max(steps, default=0)


def ends(events: list[Logged]) -> bool:
    """Whether these events end with the run's end: a run continued or resumed after it goes
    on, its later events to come."""
    lifecycle = [event for _, event in events if isinstance(event, RunFinished | RunResumed)]
    return bool(lifecycle) and isinstance(lifecycle[-1], RunFinished)


def resumes(events: list[Logged]) -> bool:
    """Whether the run went on again within these events (a continue, a resume)."""
    return any(isinstance(event, RunResumed) for _, event in events)


def framed(
    run_id: int,
    after: int,
    events: list[Logged],
    more: bool,
    run: AgentRun | None,
    asking: Asking | None = None,
) -> list[str]:
    """Out-of-band swaps in frames of at most FRAME_BYTES: new cards at the end of the run's
    steps; a card with the id of one already there replaces it. Each frame ends with the seq
    marker of its last event, so a page cut off mid-way asks for the rest; the marker also says
    the seq the frame follows (`after` for the first), so a page whose turn lacks the events
    before it (a Continue's response drew the turn anew, and the page has yet to ask again from
    the seq it shows) leaves the frame out rather than add its cards after a gap that the
    catch-up would fill later, out of order (static/chat/chat.js). When the run started, ended
    or waited within them, the last frame also carries the run's status, the sidebar's icon and
    the count of calls waiting for the person, from `run`, the run's row read after these
    events, and `asking`, the person reading."""
    frames: list[str] = []
    frame: list[str] = []
    size = 0
    asking_for = asking_of(events, asking)
    follows = after
    for index, (seq, event) in enumerate(events):
        card = card_for(run_id, seq, event, asking_for(event))
        if card is not None:
            part = render_card(card) if card.replaces else in_steps(run_id, render_card(card))
            part_size = len(part.encode())
            if frame and size + part_size > FRAME_BYTES - FRAME_TAIL_BYTES:
                last = events[index - 1].seq
                frames.append("".join(frame) + seq_marker(run_id, last, follows))
                frame, size, follows = [], 0, last
            frame.append(part)
            size += part_size
    finished = ends(events) and not more
    tail = []
    if run is not None and lifecycle(events):
        # The run may have been continued since (then it is not finished, and the page keeps
        # watching).
        finished = finished and run.is_finished
        tail = status_of(run, asking if decisions(events) else None)
    frame.append(seq_marker(run_id, events[-1].seq, follows, finished=finished))
    frames.append("".join(frame + tail))
    return frames


def status_of(run: AgentRun, asking: Asking | None = None) -> list[str]:
    """The run's status, feedback and actions once it ended, and the sidebar's icon, from its row;
    and, given `asking`, the count of calls waiting for that person."""
    offered = selectors.model_offered(run)
    waiting = waiting_calls(run)
    tail = [draw("run_status", run=run, oob=True, model_offered=offered, waiting=waiting)]
    if run.is_finished:
        feedback = getattr(run, "feedback", None)
        tail.append(draw("feedback", run=run, feedback=feedback, oob=True))
        tail.append(draw("turn_actions", run=run, oob=True))
        tail.append(draw("task_edit", run=run, oob=True))
    if run.conversation is not None:
        conversation = labelled(run.conversation)
        tail.append(draw("conversation_status", conversation=conversation, oob=True))
    if asking is not None:
        tail.append(draw("waiting_count", awaiting=waiting_of(asking.user), oob=True))
    return tail


def seq_marker(run_id: int, seq: int, after: int, *, finished: bool = False) -> str:
    """The run's marker as a frame moves it on: to `seq`, from `after`, the seq the frame
    follows."""
    return draw("seq_marker", run_id=run_id, seq=seq, after=after, finished=finished, oob=True)
