"""/api/v1/runs and /api/v1/conversations: start, read, list, stop and continue a person's
runs, and decide the calls they wait on. Each is the run operation the chat calls
(agent/runs.py, approvals/decisions.py); another person's run is 404, as one that never was."""

from django.db.models import Prefetch
from django.http import HttpRequest
from ninja import Field as SchemaField
from ninja import Query, Router, Schema, Status

from accounting.ledger import spend_by_run
from agent import runs, selectors
from agent.llm.factory import offered_models
from agent.models import AgentRun
from api.auth import DECIDE, READ, RUN, key_of, person_of
from api.errors import ApiError, not_found, refusal, refusals
from api.models import ApiKey
from api.schemas import (
    ConversationOut,
    DecisionIn,
    DecisionOut,
    RunIn,
    RunOut,
    Text,
    conversation_out,
    run_out,
)
from approvals import decisions
from approvals.models import WAITING, ApprovalRequest, Via
from approvals.waiting import CallDecision
from assistants.models import Assistant
from assistants.versions import usable_by
from core.events import Decision, RunStatus
from rights.effective import rights_of

router = Router(tags=["runs"])
REFUSED = refusals(400, 404, 409)
MAX_PAGE = 100


class Page(Schema):
    limit: int = SchemaField(20, ge=1, le=MAX_PAGE)
    before: int | None = SchemaField(
        None, ge=1, description="Only those of lower id (the next page)."
    )


class RunFilter(Page):
    conversation: int | None = SchemaField(None, ge=1)
    status: Text | None = None


def started_with(key: ApiKey) -> dict[str, object]:
    """What a run records of the key that started it (the console shows it)."""
    return {"prefix": key.prefix, "name": key.name, "scopes": list(key.scopes)}


def waiting_of(run: AgentRun) -> list[ApprovalRequest]:
    """The calls the run waits on: none unless it waits (no query for a run that does not)."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return []
    return list(run.approvals.filter(decision=WAITING).order_by("seq"))


def owned_run(request: HttpRequest, run_id: int) -> AgentRun:
    run = selectors.runs_for(person_of(request)).filter(pk=run_id).first()
    if run is None:
        raise not_found()
    return run


def shown(request: HttpRequest, run: AgentRun) -> RunOut:
    return run_out(request, run, waiting_of(run), spend_by_run([run.pk]).get(run.pk))


@router.post("/runs", response={201: RunOut, **REFUSED}, auth=RUN, url_name="runs")
def start_run(request: HttpRequest, body: RunIn) -> Status[RunOut]:
    """Start a run: a new conversation, or the next turn of one of yours. It is queued for a
    worker at once; follow it with GET /runs/{id}/events."""
    person, key = person_of(request), key_of(request)
    conversation, assistant = None, assistant_named(request, body)
    if body.conversation is not None:
        conversation = selectors.conversations_for(person).filter(pk=body.conversation).first()
        if conversation is None:
            raise not_found("conversation")
    try:
        runs.count_message(person)
        rights = rights_of(person)
        model = body.model or (assistant.model if assistant else "")
        choice = runs.chat_model(conversation, model, offered_models(rights), rights)
        if conversation is None:
            run = runs.submit_first_run(
                person, body.task, model=choice, api_key=started_with(key), assistant=assistant
            )
        else:
            run = runs.submit_run(
                person, body.task, conversation, model=choice, api_key=started_with(key)
            )
    except runs.InvalidTask as error:
        raise refusal(error) from error
    return Status(201, shown(request, run))


def assistant_named(request: HttpRequest, body: RunIn) -> Assistant | None:
    """The assistant a new conversation is started with: one the person may use
    (assistants.versions.assistants_for), or refused before anything is stored."""
    if body.assistant is None:
        return None
    if body.conversation is not None:
        raise ApiError(
            400,
            "invalid_request",
            "A conversation keeps the assistant it was started with: name `assistant` only "
            "without `conversation`.",
        )
    assistant = usable_by(person_of(request), body.assistant)
    if assistant is None:
        raise ApiError(
            404,
            "not_found",
            f"No assistant {body.assistant} you may use (archived, no longer shared with you, or "
            "never yours): see GET /api/v1/assistants.",
        )
    return assistant


@router.get("/runs", response={200: list[RunOut], **REFUSED}, auth=READ)
def list_runs(request: HttpRequest, filters: Query[RunFilter]) -> list[RunOut]:
    """Your runs, newest first, `limit` at a time; the next page is `before` the last id."""
    found = selectors.runs_for(person_of(request)).order_by("-pk")
    if filters.conversation is not None:
        found = found.filter(conversation_id=filters.conversation)
    if filters.status:
        found = found.filter(status=filters.status)
    if filters.before is not None:
        found = found.filter(pk__lt=filters.before)
    waiting = Prefetch(
        "approvals",
        queryset=ApprovalRequest.objects.filter(decision=WAITING).order_by("seq"),
        to_attr="waiting_calls",
    )
    page = list(found.prefetch_related(waiting)[: filters.limit])
    spent = spend_by_run(run.pk for run in page)
    return [run_out(request, run, run.waiting_calls, spent.get(run.pk)) for run in page]


@router.get("/runs/{run_id}", response={200: RunOut, **REFUSED}, auth=READ, url_name="run")
def read_run(request: HttpRequest, run_id: int) -> RunOut:
    """A run: its status, answer, usage, timings and the calls it waits on."""
    return shown(request, owned_run(request, run_id))


@router.post("/runs/{run_id}/stop", response={200: RunOut, **REFUSED}, auth=RUN)
def stop_run(request: HttpRequest, run_id: int) -> RunOut:
    """Ask the run to stop; it ends `cancelled` with what it did so far."""
    try:
        run = runs.cancel_run(person_of(request), run_id)
    except AgentRun.DoesNotExist:
        raise not_found() from None
    return shown(request, run)


@router.post("/runs/{run_id}/continue", response={200: RunOut, **REFUSED}, auth=RUN)
def continue_run(request: HttpRequest, run_id: int) -> RunOut:
    """Let a run that halted, was stopped or was interrupted go on from where it was."""
    try:
        runs.count_message(person_of(request))
        run = runs.continue_run(person_of(request), run_id)
    except AgentRun.DoesNotExist:
        raise not_found() from None
    except (runs.QuotaReached, runs.SendingTooFast) as error:
        raise refusal(error) from error
    except runs.InvalidTask as error:
        raise ApiError(409, "not_continuable", str(error)) from error
    return shown(request, run)


@router.post(
    "/runs/{run_id}/approvals/{call_id}", response={200: DecisionOut, **REFUSED}, auth=DECIDE
)
def decide(request: HttpRequest, run_id: int, call_id: Text, body: DecisionIn) -> DecisionOut:
    """Approve, edit or deny a call the run waits on. The audit records that a program decided
    through this key."""
    run = owned_run(request, run_id)
    call = run.approvals.filter(call_id=call_id).first()
    if call is None:
        raise not_found("call waiting in this run")
    chosen = Decision(body.decision)
    decision = CallDecision(
        call_id=call_id,
        decision=chosen,
        digest=body.digest or call.digest,
        arguments=body.arguments if chosen is Decision.EDIT else None,
        reason=body.reason if chosen is Decision.DENY else "",
        always=body.always and chosen is not Decision.DENY,
        key=key_of(request).label,
    )
    try:
        decisions.decide(person_of(request), run.pk, [decision], via=Via.API)
    except AgentRun.DoesNotExist:
        raise not_found() from None
    except decisions.DecisionRefused as error:
        raise ApiError(409, "decision_refused", str(error)) from error
    run.refresh_from_db()
    return DecisionOut(call_id=call_id, decision=body.decision, run=shown(request, run))


@router.get("/conversations", response={200: list[ConversationOut], **REFUSED}, auth=READ)
def list_conversations(request: HttpRequest, page: Query[Page]) -> list[ConversationOut]:
    """Your conversations, newest first, `limit` at a time; then `before` the last id."""
    found = selectors.conversations_with_status(person_of(request)).order_by("-pk")
    if page.before is not None:
        found = found.filter(pk__lt=page.before)
    return [conversation_out(conversation) for conversation in found[: page.limit]]
