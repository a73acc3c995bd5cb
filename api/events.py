"""A run's events over Server-Sent Events, as Loop stores them (GET /runs/{id}/events) or as
AG-UI 1.0 events (GET /runs/{id}/agui, and POST /agui, which starts or resumes a run and streams
it), so a program follows a run as the page's socket does (api/follow.py): every stored event
once, in order, from the last it had (`Last-Event-ID`, or `?after=`), the reply's pieces as the
model writes them (never stored, so never resent), a keep-alive comment when quiet.

A stream is checked before it starts (the run is the key's person's, else a JSON 404), re-checks
its key whenever it is quiet (revoked, expired, owner deactivated: it closes), lasts at most
LOOP_API_STREAM_SECONDS (then `event: timeout` and it closes; the client resumes), and a person
holds at most LOOP_API_STREAMS_PER_PERSON open in one web process (past them, 429)."""

import json
import logging
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent, RunAgentInput, TextPart, UserMessage
from ag_ui.encoder import EventEncoder
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field as SchemaField
from ninja import Query, Router, Schema
from pydantic import ValidationError

from agent import runs, selectors
from agent.llm.factory import offered_models
from agent.models import AgentRun, Conversation
from agent.selectors import Logged
from api.agui import AguiRun, Waiting
from api.auth import READ, RUN, key_of, person_of
from api.errors import ApiError, first_problem, not_found, refusal, refusals
from api.follow import Delta, Ended, Followed, Quiet, follow
from api.models import ApiKey, Scope
from api.runs import started_with
from approvals import decisions
from approvals.models import WAITING, ApprovalRequest, Via
from approvals.waiting import CallDecision
from core.events import ApprovalRequested, Decision, RunStatus
from rights.effective import rights_of

logger = logging.getLogger(__name__)

router = Router(tags=["events"])

MAX_SEQ = 2**31 - 1  # RunEvent.seq is an integer column
REFUSED = refusals(400, 404)
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE = ": keepalive\n\n"
DECIDE_AT = "/api/v1/runs/{run}/approvals/{{call_id}}"


# One Server-Sent Event, as OpenAPI 3.1 describes each event of a text/event-stream: its id,
# its name, and its data, a JSON text.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def streamed(description: str, example: str) -> dict[str, Any]:
    """The OpenAPI of a stream's 200: text/event-stream, which ninja cannot infer."""
    return {
        "responses": {
            200: {
                "description": description,
                "content": {"text/event-stream": {"schema": SSE_EVENT, "example": example}},
            }
        }
    }


PLAIN = streamed(
    "Server-Sent Events: each stored event as `id: SEQ`, `event: KIND`, `data: {seq, kind, "
    "data}`; the reply's pieces as `event: delta` (no id: never resent); `: keepalive` when "
    "quiet; `event: end` with the run's final status, or `event: timeout` (resume with "
    "Last-Event-ID), then the stream closes.",
    'id: 3\nevent: model_replied\ndata: {"seq": 3, "kind": "model_replied", "data": {...}}\n\n'
    'event: end\ndata: {"status": "succeeded"}\n\n',
)
AGUI = streamed(
    "Server-Sent Events of AG-UI 1.0 events (`data: EVENT`), each with the `id` of the run's "
    "event it came from (resume with Last-Event-ID). A call waiting for a decision finishes "
    "the segment with RUN_FINISHED's interrupt outcome; the run goes on once it is decided.",
    'data: {"type":"RUN_STARTED","threadId":"4","runId":"7","protocolVersion":"1.0"}\n\n',
)


class After(Schema):
    after: int | None = SchemaField(
        None,
        ge=0,
        le=MAX_SEQ,
        description="The last seq you had, for a client that cannot send Last-Event-ID.",
    )


@dataclass
class Slot:
    """One of a person's open streams in this process, given back once (when the stream ends,
    or when a stream never started is collected)."""

    person: int
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            _open[self.person] -= 1
            if _open[self.person] <= 0:
                del _open[self.person]


_open: Counter[int] = Counter()  # person id -> streams open in this process


def slot_for(person: User) -> Slot:
    if _open[person.pk] >= settings.LOOP_API_STREAMS_PER_PERSON:
        raise ApiError(
            429,
            "too_many_streams",
            f"You have {settings.LOOP_API_STREAMS_PER_PERSON} event streams open already; "
            "close one first.",
        )
    _open[person.pk] += 1
    return Slot(person.pk)


def resumed_after(request: HttpRequest, after: int | None) -> int:
    """The last seq the client had: its Last-Event-ID, else `?after=`, else 0."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        return after or 0
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= MAX_SEQ):
        raise ApiError(
            400,
            "invalid_last_event_id",
            f"Last-Event-ID must be the id of an event you had: a whole number 0 to {MAX_SEQ}.",
        )
    return int(text)


@database_sync_to_async
def owned(person: User, run_id: int) -> AgentRun:
    run = selectors.runs_for(person).filter(pk=run_id).first()
    if run is None:
        raise not_found()
    return run


@database_sync_to_async
def key_works(key_id: int) -> bool:
    """Whether the stream's key still works: not revoked, not expired, its owner active."""
    key = ApiKey.objects.select_related("owner").filter(pk=key_id).first()
    return not (
        key is None or key.revoked_at is not None or key.is_expired() or not key.owner.is_active
    )


@dataclass(frozen=True)
class TimedOut:
    """The stream lasted LOOP_API_STREAM_SECONDS."""


async def followed(
    person: User, key: ApiKey, run_id: int, after: int, slot: Slot
) -> AsyncIterator[Followed | TimedOut]:
    """The run followed, within the stream's bounds: it stops when its key stops working
    (checked when quiet) and after LOOP_API_STREAM_SECONDS; its slot is given back at the end."""
    deadline = time.monotonic() + settings.LOOP_API_STREAM_SECONDS
    try:
        async with aclosing(follow(person, run_id, after)) as items:
            async for item in items:
                if isinstance(item, Quiet) and not await key_works(key.pk):
                    return
                yield item
                if isinstance(item, Ended):
                    return
                if time.monotonic() > deadline:
                    yield TimedOut()
                    return
    finally:
        slot.release()


def responded(stream: AsyncIterator[str], slot: Slot) -> StreamingHttpResponse:
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    for name, value in HEADERS.items():
        response[name] = value
    weakref.finalize(stream, slot.release)  # a stream never iterated still gives its slot back
    return response


def message(data: object, *, event: str | None = None, seq: int | None = None) -> str:
    """One SSE message (its data one line of JSON)."""
    head = f"id: {seq}\n" if seq is not None else ""
    kind = f"event: {event}\n" if event else ""
    return f"{head}{kind}data: {json.dumps(data, separators=(',', ':'))}\n\n"


def plain(item: Followed | TimedOut) -> str:
    """A followed thing as the plain stream sends it."""
    match item:
        case Logged(seq=seq, event=event):
            body = {"seq": seq, "kind": event.kind, "data": event.as_dict()}
            return message(body, event=event.kind, seq=seq)
        case Delta(step=step, text=text, at=at):
            return message({"step": step, "text": text, "at": at}, event="delta")
        case Quiet():
            return KEEPALIVE
        case Ended(status=status):
            return message({"status": status}, event="end")
    return message({"seconds": settings.LOOP_API_STREAM_SECONDS}, event="timeout")


async def plain_stream(items: AsyncIterator[Followed | TimedOut]) -> AsyncIterator[str]:
    async for item in items:
        yield plain(item)


@router.get(
    "/runs/{run_id}/events",
    response=REFUSED,
    auth=READ,
    url_name="run_events",
    openapi_extra=PLAIN,
)
async def run_events(
    request: HttpRequest, run_id: int, query: Query[After]
) -> StreamingHttpResponse:
    """Follow a run's events live, from the start or after the last you had (the
    `Last-Event-ID` header, or `?after=`): no gap, no duplicate."""
    person, key = person_of(request), key_of(request)
    after = resumed_after(request, query.after)
    await owned(person, run_id)
    slot = slot_for(person)
    return responded(plain_stream(followed(person, key, run_id, after, slot)), slot)


# AG-UI


@database_sync_to_async
def waiting_of(person: User, run_id: int) -> list[tuple[int, Waiting]]:
    """The calls the person's run waits on now, with the seq of each one's request (none
    unless the run is waiting)."""
    rows = ApprovalRequest.objects.filter(
        run__in=selectors.runs_for(person).filter(pk=run_id, status=RunStatus.AWAITING_APPROVAL),
        decision=WAITING,
    ).order_by("seq")
    return [
        (row.seq, Waiting(row.call_id, row.tool, row.arguments, row.digest, row.deadline))
        for row in rows
    ]


def frames(events: list[BaseEvent], seq: int | None = None) -> str:
    encoder = EventEncoder()
    head = f"id: {seq}\n" if seq is not None else ""
    return "".join(head + encoder.encode(event) for event in events)


async def agui_stream(
    person: User,
    run: AgentRun,
    after: int,
    items: AsyncIterator[Followed | TimedOut],
) -> AsyncIterator[str]:
    """The run as AG-UI events. A waiting run's interrupt goes out once every call it waits on
    was read from its log (they are stored together with its wait), or at once when the
    client had them already (it resumed after them)."""
    mapper = AguiRun(str(run.conversation_id or ""), str(run.pk), DECIDE_AT.format(run=run.pk))
    opening = mapper.started()
    waiting = await waiting_of(person, run.pk)
    if waiting and all(seq <= after for seq, _ in waiting):
        opening += mapper.interrupted([call for _, call in waiting])
    yield frames(opening)
    async for item in items:
        if isinstance(item, Quiet):
            yield KEEPALIVE
            continue
        if isinstance(item, TimedOut):
            return
        events = mapper.take(item)
        if isinstance(item, Logged) and isinstance(item.event, ApprovalRequested):
            events += await interrupt_if_all_read(person, run.pk, mapper)
        yield frames(events, item.seq if isinstance(item, Logged) else None)


async def interrupt_if_all_read(person: User, run_id: int, mapper: AguiRun) -> list[BaseEvent]:
    waiting = [call for _, call in await waiting_of(person, run_id)]
    if waiting and {call.call_id for call in waiting} <= set(mapper.asked):
        return mapper.interrupted(waiting)
    return []


def agui_response(
    request: HttpRequest, person: User, run: AgentRun, after: int
) -> StreamingHttpResponse:
    slot = slot_for(person)
    items = followed(person, key_of(request), run.pk, after, slot)
    return responded(agui_stream(person, run, after, items), slot)


@router.get(
    "/runs/{run_id}/agui", response=REFUSED, auth=READ, url_name="run_agui", openapi_extra=AGUI
)
async def run_agui(request: HttpRequest, run_id: int, query: Query[After]) -> StreamingHttpResponse:
    """Follow a run as AG-UI 1.0 events (resumable with Last-Event-ID, as /events)."""
    person = person_of(request)
    after = resumed_after(request, query.after)
    run = await owned(person, run_id)
    return agui_response(request, person, run, after)


# RunAgentInput's outline (ag_ui's own JSON schema refers to its $defs, which an OpenAPI document
# does not resolve): the body is validated whole by ag_ui.core.RunAgentInput.
AGUI_INPUT_SCHEMA = {
    "type": "object",
    "required": ["threadId", "runId", "messages"],
    "properties": {
        "threadId": {"type": "string"},
        "runId": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "resume": {"type": "array", "items": {"type": "object"}},
    },
}
AGUI_INPUT = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": AGUI_INPUT_SCHEMA}},
        "description": "AG-UI's RunAgentInput: threadId a conversation id of yours (or any "
        "other text for a new conversation); the last user message is the task; `resume` "
        "entries decide the calls they name (interruptId: the call's id; status resolved with "
        'payload {"decision": "approve" | "deny", "reason"?}, or cancelled: deny).',
    },
    **AGUI,
}


def agui_input(request: HttpRequest) -> RunAgentInput:
    try:
        return RunAgentInput.model_validate_json(request.body)
    except ValidationError as error:
        problems: list[dict[str, Any]] = [dict(problem) for problem in error.errors()]
        raise ApiError(422, "invalid_request", first_problem(problems)) from None


def task_of(given: RunAgentInput) -> str:
    """The last user message's text: the task."""
    for said in reversed(given.messages):
        if isinstance(said, UserMessage):
            if isinstance(said.content, str):
                return said.content
            return "\n".join(part.text for part in said.content if isinstance(part, TextPart))
    return ""


def thread_of(person: User, thread_id: str) -> Conversation | None:
    """The person's conversation the thread names; None for a new one (a thread id that is
    not a number); another person's is 404."""
    if not (thread_id.isascii() and thread_id.isdigit() and len(thread_id) < 19):
        return None
    conversation = selectors.conversations_for(person).filter(pk=int(thread_id)).first()
    if conversation is None:
        raise not_found("conversation")
    return conversation


def decision_of(entry: Any) -> tuple[Decision, str]:
    """A resume entry's decision and a denial's reason."""
    if entry.status == "cancelled":
        return Decision.DENY, "Cancelled from the program."
    payload = entry.payload
    if isinstance(payload, dict):
        chosen, reason = payload.get("decision", "approve"), str(payload.get("reason") or "")
    elif isinstance(payload, bool):
        chosen, reason = ("approve" if payload else "deny"), ""
    else:
        chosen, reason = str(payload or "approve"), ""
    if chosen not in ("approve", "deny"):
        raise ApiError(422, "invalid_request", "A resume entry's decision is approve or deny.")
    return Decision(chosen), reason if chosen == "deny" else ""


def resumed(
    request: HttpRequest, conversation: Conversation, given: RunAgentInput
) -> tuple[AgentRun, int]:
    """Decide the calls the resume entries name (in the conversation's run that waits on
    them); the run they belong to, and its last seq before the decision (the stream goes on
    from there)."""
    key = key_of(request)
    if Scope.DECIDE not in key.scopes:
        raise ApiError(403, "scope_missing", "Deciding a call takes a key with the decide scope.")
    person = person_of(request)
    entries = given.resume or []
    calls = ApprovalRequest.objects.filter(
        run__in=selectors.runs_for(person).filter(conversation=conversation),
        call_id__in=[entry.interrupt_id for entry in entries],
        decision=WAITING,
    ).select_related("run")
    by_id = {call.call_id: call for call in calls}
    if len(by_id) != len(entries) or len({call.run_id for call in by_id.values()}) != 1:
        raise not_found("call waiting in this thread")
    chosen = []
    for entry in entries:
        decision, reason = decision_of(entry)
        call = by_id[entry.interrupt_id]
        chosen.append(
            CallDecision(call.call_id, decision, call.digest, reason=reason, key=key.label)
        )
    run = next(iter(by_id.values())).run
    before = last_seq(run)
    try:
        decisions.decide(person, run.pk, chosen, via=Via.API)
    except decisions.DecisionRefused as error:
        raise ApiError(409, "decision_refused", str(error)) from error
    return run, before


def started(request: HttpRequest, conversation: Conversation | None, task: str) -> AgentRun:
    person, key = person_of(request), key_of(request)
    try:
        runs.count_message(person)
        rights = rights_of(person)
        choice = runs.chat_model(conversation, "", offered_models(rights), rights)
        if conversation is None:
            return runs.submit_first_run(person, task, model=choice, api_key=started_with(key))
        return runs.submit_run(person, task, conversation, model=choice, api_key=started_with(key))
    except runs.InvalidTask as error:
        raise refusal(error) from error


def run_for_input(request: HttpRequest, given: RunAgentInput) -> tuple[AgentRun, int]:
    """The run the input starts or resumes, and the seq to stream it after."""
    conversation = thread_of(person_of(request), given.thread_id)
    if given.resume:
        if conversation is None:
            raise not_found("conversation")
        return resumed(request, conversation, given)
    task = task_of(given)
    if not task.strip():
        raise ApiError(422, "invalid_request", "Give the task as the last user message.")
    return started(request, conversation, task), 0


def last_seq(run: AgentRun) -> int:
    seq = run.events.order_by("-seq").values_list("seq", flat=True).first()
    return seq or 0


stream_input: Callable[[HttpRequest, RunAgentInput], Any] = database_sync_to_async(run_for_input)


@router.post("/agui", response=REFUSED, auth=RUN, url_name="agui", openapi_extra=AGUI_INPUT)
async def agui(request: HttpRequest) -> StreamingHttpResponse:
    """Drive Loop as an AG-UI agent: start a run with the last user message (in the thread's
    conversation, or a new one), or resume one by deciding the calls it waits on, and follow it
    as AG-UI events."""
    given = agui_input(request)
    run, after = await stream_input(request, given)
    return agui_response(request, person_of(request), run, after)
