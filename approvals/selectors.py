"""The reads of tool calls that wait for a decision, as the pages, the socket and runagent ask
them: what waits for a person, and how many; what a run waits on; when each of a person's
waiting calls may no longer be decided; a run's latest decisions."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from agent.models import AgentRun
from agent.selectors import Logged, runs_for
from approvals.models import WAITING, ApprovalRequest, approval_window, deadline_after
from core.events import ApprovalDecided, RunStatus, loaded


def waiting_for(user: User) -> QuerySet[ApprovalRequest]:
    """Every call that waits for the person's decision, across their conversations, oldest
    first. One past its deadline is not listed nor counted, whenever the minute's sweep runs: it
    can no longer be decided."""
    return (
        ApprovalRequest.objects.filter(
            decision=WAITING,
            run__in=runs_for(user),
            run__status=RunStatus.AWAITING_APPROVAL,
            created_at__gt=timezone.now() - approval_window(),
        )
        .select_related("run", "run__conversation")
        .order_by("created_at", "seq")
    )


@dataclass(frozen=True)
class Waiting:
    """How many calls wait for the person's decision, in all their runs, and the conversation of
    the oldest (None: none waits in a conversation; runagent's runs have none)."""

    count: int
    conversation_id: int | None


def waiting_of(user: User) -> Waiting:
    conversations = list(waiting_for(user).values_list("run__conversation_id", flat=True))
    oldest = next((found for found in conversations if found is not None), None)
    return Waiting(len(conversations), oldest)


def waiting_calls(run: AgentRun) -> list[ApprovalRequest]:
    """The calls the run waits on, for its "Approve all" and "Deny all" (no query for a run
    that waits on nothing)."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return []
    return list(run.approvals.filter(decision=WAITING).order_by("seq"))


def deadlines_of(user: User) -> dict[tuple[int, str], datetime]:
    """When each call waiting for the person may no longer be decided, by run and call."""
    asked = ApprovalRequest.objects.filter(decision=WAITING, run__in=runs_for(user))
    rows = asked.values_list("run_id", "call_id", "created_at")
    return {(run_id, call_id): deadline_after(at) for run_id, call_id, at in rows}


def latest_decisions(run: AgentRun, count: int) -> list[Logged]:
    """The run's last `count` decisions, from its log: those just made, with their seqs."""
    rows = run.events.filter(kind=ApprovalDecided.kind).order_by("-seq")[:count]
    return [
        Logged(seq, loaded(kind, data))
        for seq, kind, data in reversed(rows.values_list("seq", "kind", "data"))
    ]
