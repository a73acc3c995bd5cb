"""The operations on a tool call that waits for its person's decision (core.approval): decide
it (approve, edit and approve, deny, and "always allow" the tool in the conversation), let it
expire, list what waits for a person. A decision and the run's return to the queue are one
transaction; a decision is bound to its call's digest and made once."""

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from pydantic import ValidationError

from agent.allowed import allowed_now
from agent.bus import EventRow
from agent.models import AgentRun
from agent.queue import DECIDED_PRIORITY
from agent.recorder import RunRecorder
from agent.runs import InvalidTask, queue, start_next_queued
from agent.selectors import runs_for
from agent.toolset import registry_for
from approvals.models import WAITING, ApprovalRequest, ToolGrant, Via, approval_window
from approvals.policy import Modes, grant_of, granted_tools, site_asks, site_modes
from approvals.waiting import (
    CallDecision,
    approval_window_said,
    asked_again_words,
    end_waiting,
    record_decision,
)
from core.events import Decision, Event, RunStatus
from tools.base import Tool

# How long a denial's reason may be.
REASON_CHARS = 2000


class DecisionRefused(InvalidTask):
    """A decision that cannot be taken; nothing changed."""


# Deciding ---------------------------------------------------------------------------------------


def decide(
    user: User,
    run_id: int,
    decisions: Sequence[CallDecision],
    *,
    queue_it: bool = True,
    via: Via = Via.WEB,
) -> list[ApprovalRequest]:
    """The run's person decides on calls it waits on. Another person's run does not exist here.
    `queue_it` False: once decided, the run waits for this process to work it (runagent);
    `via`: where the person decided (the audit says so)."""
    return decide_on(runs_for(user), run_id, decisions, by=user, queue_it=queue_it, via=via)


def may_decide_for_others(user: User, decision: Decision) -> bool:
    """Operators who may stop anyone's run may deny a waiting call (a denial runs nothing);
    approving on a person's behalf needs a permission of its own."""
    if not (user.is_active and user.is_staff):
        return False
    if decision is Decision.DENY:
        return user.has_perm("agent.change_agentrun")
    return user.has_perm("approvals.decide_for_others")


def decide_as_operator(
    operator: User, run_id: int, decisions: Sequence[CallDecision]
) -> list[ApprovalRequest]:
    for decision in decisions:
        if not may_decide_for_others(operator, decision.decision):
            raise PermissionDenied(
                f"{operator.get_username()} may not {decision.decision} calls on a person's behalf."
            )
    return decide_on(AgentRun.objects.all(), run_id, decisions, by=operator, via=Via.CONSOLE)


def decide_on(
    runs: QuerySet[AgentRun],
    run_id: int,
    decisions: Sequence[CallDecision],
    *,
    by: User,
    queue_it: bool = True,
    via: Via = Via.WEB,
) -> list[ApprovalRequest]:
    """Each decision is checked against its waiting call (still waiting, the run still
    waiting, before its deadline, the digest its own, an edit valid for the tool) before
    anything changes; then the decisions, their events, and, once no call of the run waits any
    more, the run's return to the queue, in one transaction. Its page hears it once committed.
    A run past the deadline of a call it waits on is refused any decision, and expires."""
    if not decisions:
        raise DecisionRefused("Say what to do with the call.")
    taken = taken_in_time(runs, run_id, decisions, by=by, queue_it=queue_it, via=via)
    if isinstance(taken, ApprovalRequest):  # too late: the run ends as the expiry ends it
        expire(taken.run_id)
        raise DecisionRefused(expired_text(taken))
    taken.recorder.announce(taken.rows)
    return taken.requests


@dataclass
class Taken:
    """Decisions recorded, for their run's page to hear once committed."""

    requests: list[ApprovalRequest]
    recorder: RunRecorder
    rows: list[EventRow]


def taken_in_time(
    runs: QuerySet[AgentRun],
    run_id: int,
    decisions: Sequence[CallDecision],
    *,
    by: User,
    queue_it: bool,
    via: Via,
) -> Taken | ApprovalRequest:
    """The decisions checked and recorded in one transaction; or, nothing taken, the call the
    run waits on whose deadline passed."""
    with transaction.atomic():
        run = runs.select_for_update(of=("self",)).select_related("user").get(pk=run_id)
        waiting = {request.call_id: request for request in waiting_calls(run)}
        # Read under the run's lock, which the expiry takes too: a decision is taken before
        # the deadline or not at all, never both taken and expired.
        late = past_deadline(waiting.values())
        if late is not None:
            return late
        checked = [checked_decision(run, waiting, decision) for decision in decisions]
        events: list[Event] = [record_decision(r, d, by, via) for r, d in checked]
        grant_tools(run, checked, by)
        recorder = RunRecorder(run)
        rows = recorder.record(events)
        if not run.approvals.filter(decision=WAITING).exists():
            AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)
            if queue_it:
                queue(run, DECIDED_PRIORITY)
    return Taken([request for request, _ in checked], recorder, rows)


def past_deadline(requests: Iterable[ApprovalRequest]) -> ApprovalRequest | None:
    """The call of these whose deadline passed first, if any has passed."""
    now = timezone.now()
    return min((r for r in requests if r.expired(now)), key=lambda r: r.deadline, default=None)


def expired_text(request: ApprovalRequest) -> str:
    return (
        f"This request expired at {moment_words(request.deadline)}: nobody decided within "
        f"{approval_window_said()}, so the {request.tool} call did not run. "
        f"{asked_again_words(request.run)}"
    )


def moment_words(moment: datetime) -> str:
    """A moment as a person reads it: the time in the site's zone, with its day unless today."""
    local = timezone.localtime(moment)
    day = "" if local.date() == timezone.localdate() else f"{local.day} {local:%b} "
    return f"{day}{local:%H:%M %Z}"


def waiting_calls(run: AgentRun) -> list[ApprovalRequest]:
    """The run's calls that wait for a decision, locked: none unless the run waits."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return []
    return list(run.approvals.select_for_update().filter(decision=WAITING))


def checked_decision(
    run: AgentRun, waiting: dict[str, ApprovalRequest], decision: CallDecision
) -> tuple[ApprovalRequest, CallDecision]:
    request = waiting.get(decision.call_id)
    if request is None:
        raise DecisionRefused(not_waiting(run, decision.call_id))
    if decision.digest != request.digest:
        raise DecisionRefused(
            f"This decision is for another version of the {request.tool} call (its arguments "
            "differ): nothing was done. Reload the page and decide on the call as it is."
        )
    if decision.decision not in (Decision.APPROVE, Decision.EDIT, Decision.DENY):
        raise DecisionRefused(f"{decision.decision!r} is not a decision a person makes.")
    if len(decision.reason) > REASON_CHARS:
        raise DecisionRefused(f"Give the reason in at most {REASON_CHARS:,} characters.")
    if decision.decision is Decision.EDIT:
        arguments = edited_arguments(run, request.tool, decision.arguments or "")
        decision = dataclasses.replace(decision, arguments=arguments)
    return request, decision


def not_waiting(run: AgentRun, call_id: str) -> str:
    request = run.approvals.filter(call_id=call_id).first()
    if request is None:
        return "This run has no such call waiting for a decision: nothing was done."
    if request.decision == Decision.EXPIRED:
        return expired_text(request)
    if request.decision:
        return (
            f"The {request.tool} call was decided already ({request.decision}); a call is "
            "decided once. Nothing was done."
        )
    return f"The run no longer waits for decisions (it is {run.status}): nothing was done."


def edited_arguments(run: AgentRun, tool_name: str, arguments: str) -> str:
    """The person's arguments, checked against the tool's schema: the call runs with exactly
    these (as JSON), or the edit is refused with the reason. The tool is one the run may use now
    (agent.allowed.allowed_now): one its person's groups took away since is not edited."""
    tool = registry_for(run.user, allowed_now(run)).tools.get(tool_name)
    if tool is None:
        raise DecisionRefused(
            f"{tool_name} is not a tool this run may use now; it cannot be edited. Reject the "
            "call, or approve it to let the run carry on without it."
        )
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as error:
        raise DecisionRefused(f"The edited arguments are not valid JSON: {error}.") from None
    try:
        tool.arguments.model_validate(parsed)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, problem['loc'])) or 'arguments'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise DecisionRefused(f"The edited arguments do not fit {tool_name}: {problems}.") from None
    return json.dumps(parsed, ensure_ascii=False)


def grant_tools(
    run: AgentRun,
    decided: Iterable[tuple[ApprovalRequest, CallDecision]],
    by: User,
) -> None:
    """ "Always allow" in the run's conversation, for tools the site does not require asking
    about (the person cannot allow what the site asks) and that do not ask whatever is allowed
    (a destructive MCP tool): each bound to the tool the person's runs get under that name now,
    an MCP tool's server with it."""
    wanted = {request.tool for request, decision in decided if decision.always}
    if not wanted:
        return
    if run.conversation_id is None:
        raise DecisionRefused(
            "This run belongs to no conversation (it came from the terminal): there is nothing "
            "to always allow its tools in. Approve the call alone."
        )
    rights = allowed_now(run)
    modes, tools = site_modes(), registry_for(run.user, rights).tools
    granted = granted_tools(run.conversation_id)
    for name in sorted(wanted):
        tool = grantable(tools.get(name), name, modes)
        if name in rights.ask:
            raise DecisionRefused(
                f"Your group or assistant asks before every {name} call: it cannot be always "
                "allowed. Approve the call alone."
            )
        if grant_of(tool) in granted:
            continue
        live = ToolGrant.objects.filter(
            conversation_id=run.conversation_id, tool=name, revoked_at__isnull=True
        )
        live.update(revoked_at=timezone.now())  # a grant of another server's tool of that name
        ToolGrant.objects.create(
            conversation_id=run.conversation_id, tool=name, server_id=tool.server_id, granted_by=by
        )


def grantable(tool: Tool | None, name: str, modes: Modes) -> Tool:
    """The tool a person may always allow, or DecisionRefused saying why not."""
    if tool is None:
        raise DecisionRefused(
            f"{name} is not one of your tools any more: it cannot be always allowed."
        )
    if site_asks(name, modes):
        raise DecisionRefused(
            f"The site asks before every {name} call: it cannot be always allowed."
        )
    if tool.always_ask:
        raise DecisionRefused(
            f"{name} may destroy data, its server says: it asks before every call and cannot be "
            "always allowed. Approve the call alone."
        )
    return tool


# Ending a waiting run ---------------------------------------------------------------------------


def expire_waiting() -> int:
    """The runs whose oldest waiting call is past its deadline end halted, the calls never run
    (a wait never fails open). Says how many ended."""
    limit = timezone.now() - approval_window()
    stale = ApprovalRequest.objects.filter(
        decision=WAITING, created_at__lt=limit, run__status=RunStatus.AWAITING_APPROVAL
    )
    ended = 0
    for run_id in sorted(set(stale.values_list("run_id", flat=True))):
        ended += expire(run_id)
    return ended


def expire(run_id: int) -> bool:
    """A run past the deadline of a call it waits on ends halted for want of a decision, its
    waiting calls never run: the periodic sweep's end and a late decision's, the same. False if
    it no longer waits."""
    return end_waiting(run_id, RunStatus.HALTED, on_end=start_next_queued)
