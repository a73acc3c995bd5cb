"""What the notifications hear of runs (agent.observers, once each batch of a run's events is
committed): each event that matters becomes a webhook delivery per endpoint that wants it and,
when its person asked, a mail job. Quick, in the recording thread: rows and jobs, no network."""

from collections.abc import Sequence

from django.conf import settings

from agent.models import AgentRun
from core.events import ApprovalDecided, ApprovalRequested, Event, RunFinished, RunStatus
from notifications.links import run_data
from notifications.mail import wants_mail
from notifications.models import EventType, MailReason
from notifications.queue import defer_mail
from notifications.webhooks import endpoints_for, queue_deliveries

FAILED = (RunStatus.FAILED, RunStatus.INTERRUPTED)


def heard(run: AgentRun, events: Sequence[Event]) -> None:
    """Tell of the batch's events: a run's wait once (however many calls it waits on), each
    decision, its end. A mail's job is queued before the webhooks' (a receiver that hears of an
    event knows its mail job is queued)."""
    if any(isinstance(event, ApprovalRequested) for event in events):
        mail(run, MailReason.WAITING)
        tools = waiting_tools(events)
        tell(run, EventType.RUN_WAITING, RunStatus.AWAITING_APPROVAL, {"tools": tools})
    for event in events:
        match event:
            case ApprovalDecided():
                tell(run, EventType.APPROVAL_DECIDED, status_now(run), decided(event))
            case RunFinished(status=status) if status in FAILED:
                mail(run, MailReason.FAILED)
                tell(run, EventType.RUN_FAILED, status, {"cause": event.cause})
            case RunFinished(status=status):
                if event.duration >= settings.LOOP_NOTIFY_LONG_RUN_SECONDS:
                    mail(run, MailReason.LONG_RUN)
                tell(run, EventType.RUN_FINISHED, status, {"halt_reason": event.halt_reason})


def waiting_tools(events: Sequence[Event]) -> list[str]:
    return [event.tool for event in events if isinstance(event, ApprovalRequested)]


def decided(event: ApprovalDecided) -> dict[str, object]:
    """A decision as a webhook says it: the call and what became of it, never its arguments or a
    denial's reason (the person's words)."""
    return {"call_id": event.call_id, "tool": event.tool, "decision": event.decision}


def status_now(run: AgentRun) -> str:
    """The run's status as stored now: after a decision, waiting still or queued again."""
    return AgentRun.objects.filter(pk=run.pk).values_list("status", flat=True).first() or ""


def tell(run: AgentRun, event_type: EventType, status: str, extra: dict[str, object]) -> None:
    endpoints = endpoints_for(run.user_id, event_type)
    if endpoints:
        queue_deliveries(endpoints, event_type, {**run_data(run, status), **extra}, run.pk)


def mail(run: AgentRun, reason: MailReason) -> None:
    if wants_mail(run.user_id, reason):
        defer_mail(run.pk, reason)
