"""What the API's run operations take and give, as typed schemas (the OpenAPI document is made
from them)."""

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Schema
from pydantic import AfterValidator

from accounting.ledger import Spend
from accounting.reports import amount_text, single_cost
from agent.models import AgentRun, Conversation
from approvals.models import ApprovalRequest


def without_nul(text: str) -> str:
    """A text Loop may store or look up: PostgreSQL can hold no NUL character (a 500 else)."""
    if "\x00" in text:
        raise ValueError("holds a NUL character, which Loop cannot store or look up")
    return text


# Text a program sends that reaches the database as it is.
Text = Annotated[str, AfterValidator(without_nul)]


class RunIn(Schema):
    task: str = Field(description="What the agent should do (LOOP_TASK_MAX_CHARS at most).")
    conversation: int | None = Field(
        None, description="Go on in this conversation of yours; none starts a new one."
    )
    model: str = Field(
        "", description="One of the models this Loop offers (GET /models); none: the default."
    )
    assistant: int | None = Field(
        None,
        ge=1,
        description="Start the new conversation with this assistant of yours (GET /assistants): "
        "its instructions, tools, model (when none is named) and approvals. Only for a new "
        "conversation: one keeps the assistant it was started with.",
    )


class Usage(Schema):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    iterations: int
    tool_calls: int


class Timings(Schema):
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    seconds: float | None = Field(description="From its start to its end, or to now.")


class WaitingCall(Schema):
    call_id: str
    tool: str
    arguments: str = Field(description="As the model proposed them (JSON).")
    digest: str
    step: int
    asked_at: datetime
    deadline: datetime
    why: str


class Links(Schema):
    self: str
    events: str
    agui: str
    page: str | None


class RunAssistant(Schema):
    id: int
    version: int = Field(
        description="The version the run was started with; a later edit of "
        "the assistant changes nothing of this run."
    )
    name: str


class RunOut(Schema):
    id: int
    conversation: int | None
    task: str
    status: str = Field(
        description=(
            "queued, running, awaiting_approval, succeeded, halted, cancelled, failed or "
            "interrupted"
        )
    )
    halt_reason: str
    answer: str
    error: str
    provider: str
    model: str
    usage: Usage
    cost: str | None = Field(
        description=(
            "What its model turns cost so far, a decimal string in `currency`; null when a turn's "
            "model had no price (`price_unknown`), or its turns were priced in two currencies."
        )
    )
    currency: str | None = Field(description="ISO 4217, like USD; null with no cost.")
    price_unknown: bool = Field(description="A turn of it had no price: its cost is unknown.")
    timings: Timings
    waiting: list[WaitingCall] = Field(description="Calls that wait for a decision.")
    started_with_key: str | None = Field(description="The key's prefix, if a key started it.")
    assistant: RunAssistant | None = Field(description="The assistant it ran as, if any.")
    links: Links


class ConversationOut(Schema):
    id: int
    title: str
    model: str
    created_at: datetime
    updated_at: datetime
    pinned: bool
    archived: bool
    last_status: str


class DecisionIn(Schema):
    decision: Literal["approve", "edit", "deny"]
    arguments: Text | None = Field(None, description="For edit: the call's new arguments, JSON.")
    reason: Text = Field("", description="For deny: why, for the model to read.")
    always: bool = Field(
        False, description="Approve, and allow this tool for the rest of the conversation."
    )
    digest: Text | None = Field(
        None, description="The digest of the call you saw (GET the run); refused if it differs."
    )


class DecisionOut(Schema):
    call_id: str
    decision: str
    run: RunOut


def waiting_call(request: ApprovalRequest) -> WaitingCall:
    return WaitingCall(
        call_id=request.call_id,
        tool=request.tool,
        arguments=request.arguments,
        digest=request.digest,
        step=request.step,
        asked_at=request.created_at,
        deadline=request.deadline,
        why=request.why,
    )


def seconds_of(run: AgentRun) -> float | None:
    if run.started_at is None:
        return None
    end = run.finished_at or datetime.now(tz=run.started_at.tzinfo)
    return round((end - run.started_at).total_seconds(), 3)


def page_of(request: HttpRequest, run: AgentRun) -> str | None:
    if run.conversation_id is None:
        return None
    return request.build_absolute_uri(reverse("chat:conversation", args=[run.conversation_id]))


def run_out(
    request: HttpRequest, run: AgentRun, waiting: list[ApprovalRequest], spend: Spend | None
) -> RunOut:
    """The run as the API shows it; `spend`: its charges summed (None: it has none yet)."""
    key: Any = run.api_key or {}
    priced = spend is not None and spend.turns > 0
    cost, currency = single_cost(spend) if spend is not None and priced else (Decimal(0), "")
    return RunOut(
        id=run.pk,
        conversation=run.conversation_id,
        task=run.task,
        status=run.status,
        halt_reason=run.halt_reason,
        answer=run.answer,
        error=run.error,
        provider=run.provider,
        model=run.model,
        usage=Usage(
            input_tokens=run.prompt_tokens,
            output_tokens=run.completion_tokens,
            total_tokens=run.prompt_tokens + run.completion_tokens,
            iterations=run.iterations,
            tool_calls=run.tool_calls,
        ),
        cost=None if cost is None else amount_text(cost),
        currency=currency or None,
        price_unknown=spend is not None and spend.unpriced_turns > 0,
        timings=Timings(
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            seconds=seconds_of(run),
        ),
        waiting=[waiting_call(call) for call in waiting],
        started_with_key=key.get("prefix"),
        assistant=(run.allowed or {}).get("assistant"),
        links=Links(
            self=request.build_absolute_uri(reverse("api:run", args=[run.pk])),
            events=request.build_absolute_uri(reverse("api:run_events", args=[run.pk])),
            agui=request.build_absolute_uri(reverse("api:run_agui", args=[run.pk])),
            page=page_of(request, run),
        ),
    )


def conversation_out(conversation: Conversation) -> ConversationOut:
    shown: Any = conversation
    return ConversationOut(
        id=conversation.pk,
        title=conversation.title,
        model=conversation.model,
        created_at=conversation.created_at,
        updated_at=conversation.updated_at,
        pinned=conversation.pinned_at is not None,
        archived=conversation.archived_at is not None,
        last_status=getattr(shown, "last_status", None) or "",
    )
