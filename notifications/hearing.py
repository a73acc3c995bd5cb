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
    decision, its end."""
    if any(isinstance(event, ApprovalRequested) for event in events):
        tell(run, EventType.RUN_WAITING, {"tools": waiting_tools(events)})
        mail(run, MailReason.WAITING)
    for event in events:
        match event:
            case ApprovalDecided():
                tell(run, EventType.APPROVAL_DECIDED, decided(event))
            case RunFinished(status=status) if status in FAILED:
                tell(run, EventType.RUN_FAILED, {"cause": event.cause})
                mail(run, MailReason.FAILED)
            case RunFinished():
                tell(run, EventType.RUN_FINISHED, {})
                if event.duration >= settings.LOOP_NOTIFY_LONG_RUN_SECONDS:
                    mail(run, MailReason.LONG_RUN)


def waiting_tools(events: Sequence[Event]) -> list[str]:
    return [event.tool for event in events if isinstance(event, ApprovalRequested)]


def decided(event: ApprovalDecided) -> dict[str, object]:
    """A decision as a webhook says it: the call and what became of it, never its arguments or a
    denial's reason (the person's words)."""
    return {"call_id": event.call_id, "tool": event.tool, "decision": event.decision}


def tell(run: AgentRun, event_type: EventType, extra: dict[str, object]) -> None:
    endpoints = endpoints_for(run.user_id, event_type)
    if endpoints:
        queue_deliveries(endpoints, event_type, {**run_data(run), **extra}, run.pk)


def mail(run: AgentRun, reason: MailReason) -> None:
    if wants_mail(run.user_id, reason):
        defer_mail(run.pk, reason)
