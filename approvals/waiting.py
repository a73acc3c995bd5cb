"""Ending a run that waits for its person's decision (core.approval) without a worker:
a Stop, or a wait past LOOP_APPROVAL_SECONDS. The calls it waited on are recorded as never run,
with their audit rows' decisions, then the run's end with what it had done. Also the one way a
decision is written on its audit row (approvals/decisions.py decides)."""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agent.abandoned import ended_from_log
from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import start_next_queued
from approvals.models import WAITING, ApprovalRequest, Via
from core.approval import CANCELLED_TEXT, EXPIRED_TEXT
from core.events import (
    ApprovalDecided,
    Decision,
    Event,
    HaltReason,
    RunHalted,
    RunStatus,
    ToolCallFinished,
    event_from_dict,
)
from core.results import ToolStatus
from core.state import replay


@dataclass(frozen=True)
class CallDecision:
    """A decision on one waiting call, as its decider sent it: `digest` must be the call's."""

    call_id: str
    decision: Decision
    digest: str
    arguments: str | None = None  # an edit's
    reason: str = ""
    always: bool = False  # approve, and allow this tool for the rest of the conversation
    key: str = ""  # decided through the API: the key's label (api.models.ApiKey.label)


def record_decision(
    request: ApprovalRequest,
    decision: CallDecision,
    by: User | None,
    via: Via | None = None,
) -> ApprovalDecided:
    """The audit row's decision, and its event for the run's log; `via`: where it was made
    (None for Loop's own, stored as "")."""
    request.decision = decision.decision
    request.decided_at = timezone.now()
    request.decided_by = by
    request.decided_via = via or ""
    request.decided_key = decision.key
    request.edited_arguments = (
        decision.arguments or "" if decision.decision is Decision.EDIT else ""
    )
    request.reason = decision.reason.replace("\x00", "").strip()
    request.save(
        update_fields=[
            *("decision", "decided_at", "decided_by", "decided_via", "decided_key"),
            *("edited_arguments", "reason"),
        ]
    )
    return ApprovalDecided(
        step=request.step,
        call_id=request.call_id,
        tool=request.tool,
        decision=decision.decision,
        arguments=request.edited_arguments,
        reason=request.reason,
        by=by.get_username() if by is not None else "",
        operator=via == Via.CONSOLE,
    )


def end_waiting(
    run_id: int, status: RunStatus, on_end: Callable[[AgentRun], object] | None = None
) -> bool:
    """End a waiting run without a worker: its waiting calls recorded as not run (cancelled,
    or expired), then its end (`cancelled`; `halted` for want of a decision) with what it had
    done. False if it does not wait. A Stop is recorded on the run by its caller first
    (agent.runs.record_stop)."""
    expired = status is RunStatus.HALTED
    with transaction.atomic():
        run = AgentRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != RunStatus.AWAITING_APPROVAL:
            return False
        decision = Decision.EXPIRED if expired else Decision.CANCELLED
        events: list[Event] = []
        for request in run.approvals.select_for_update().filter(decision=WAITING):
            events.append(
                record_decision(request, CallDecision(request.call_id, decision, ""), None)
            )
            events.append(not_run(request, EXPIRED_TEXT if expired else CANCELLED_TEXT))
        recorder = RunRecorder(run, on_end=on_end)
        rows = recorder.record(ended_waiting(run, events, expired))
    recorder.announce(rows)
    return True


def stop_waiting(sender: object, run_id: int, **kwargs: object) -> bool:
    """A Stop of a run that waits for decisions (agent.signals.stop_requested): it ends here,
    cancelled, its calls never run, and its conversation's next task starts. False if it does
    not wait."""
    return end_waiting(run_id, RunStatus.CANCELLED, on_end=start_next_queued)


def not_run(request: ApprovalRequest, why: str) -> ToolCallFinished:
    return ToolCallFinished(
        step=request.step,
        call_id=request.call_id,
        tool=request.tool,
        arguments=request.arguments,
        status=ToolStatus.SKIPPED,
        text=why,
        duration=0.0,
    )


def approval_window_said() -> str:
    """How long a call waits for a decision, in the unit the setting is a whole number of:
    "24 hours", "10 minutes", "45 seconds" (not "0.0125 hours")."""
    seconds = int(settings.LOOP_APPROVAL_SECONDS)
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}{'s' if seconds != size else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def asked_again_words(run: AgentRun) -> str:
    """How a call that expired is asked about again: a conversation's run is continued from its
    page; one started at a terminal has no page, so only whoever started it can, from there."""
    if run.conversation_id is None:
        return "Whoever started this run at a terminal can resume it there to be asked again."
    return "Continue the run to be asked again."


def ended_waiting(run: AgentRun, events: list[Event], expired: bool) -> list[Event]:
    """`events`, then the run's end with what its log says it did: cancelled, or, `expired`,
    halted for want of a decision."""
    rows = run.events.order_by("seq").values_list("kind", "data")
    state = replay([*(event_from_dict(kind, data) for kind, data in rows), *events])
    if not expired:
        return [*events, ended_from_log(RunStatus.CANCELLED, state)]
    detail = (
        f"nobody decided within {approval_window_said()} whether a call it waited on may run; "
        f"the call did not run. {asked_again_words(run)}"
    )
    halted = RunHalted(step=state.step, reason=HaltReason.NO_DECISION, detail=detail)
    ended = dataclasses.replace(
        ended_from_log(RunStatus.HALTED, state),
        halt_reason=HaltReason.NO_DECISION,
        detail=detail,
    )
    return [*events, halted, ended]
