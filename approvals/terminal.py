"""The calls a run waits on, decided in this process (`runagent`): each shown to its person in
the terminal (the tool, why it asks, its arguments), then approved, edited or denied through
approvals.decisions.decide, the page's one way to decide, so every check and record is the same."""

import json
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db.models import QuerySet

from agent.models import AgentRun
from approvals.decisions import DecisionRefused, decide
from approvals.models import WAITING, ApprovalRequest, Via
from approvals.waiting import CallDecision
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    Decision,
    Event,
    RunStatus,
    event_from_dict,
)

# The decision on one waiting call, asked of whoever decides.
Chooser = Callable[[ApprovalRequest], CallDecision]

# A terminal's escapes start with a C0 or C1 control character (ESC, CSI): the model's answer,
# its thinking, a tool's output or the code it proposes could otherwise clear the screen or write
# the clipboard (OSC 52).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

APPROVE_WORDS = ("a", "approve", "y", "yes")
EDIT_WORDS = ("e", "edit")
DENY_WORDS = ("d", "deny", "n", "no")


def terminal_safe(line: str) -> str:
    """A line as the terminal is to show it: control characters but newline and tab written as
    `?`. `--json` needs no such care: json.dumps escapes them."""
    return _CONTROL.sub("?", line)


def waiting(run: AgentRun) -> QuerySet[ApprovalRequest]:
    """The run's calls still waiting for a decision (none once the run no longer waits: a Stop
    on the page ended it meanwhile, say)."""
    return ApprovalRequest.objects.filter(
        run_id=run.pk, decision=WAITING, run__status=RunStatus.AWAITING_APPROVAL
    )


def next_waiting(run: AgentRun) -> ApprovalRequest | None:
    """The run's first call still waiting, in the model's order: its log's. The rows of one
    reply's calls are inserted in one statement, which numbers them in no set order."""
    calls = {request.call_id: request for request in waiting(run)}
    asked = run.events.filter(kind=ApprovalRequested.kind).order_by("seq")
    in_order = asked.values_list("data__call_id", flat=True)
    return next((calls[call_id] for call_id in in_order if call_id in calls), None)


def waiting_count(run: AgentRun) -> int:
    return waiting(run).count()


def decide_here(
    run: AgentRun,
    choose: Chooser,
    *,
    refused: Callable[[str], None],
    then: Callable[[Event], None],
) -> None:
    """Each call the run waits on, decided in turn by `choose`, as the run's owner; `then`
    hears each decision as the run's log has it. A decision refused (an edit that does not fit
    the tool, a call decided on the page meanwhile) is told to `refused`, and whatever still
    waits is asked about again. Once the last call is decided the run is queued for this process
    to work (no job: approvals.decisions.decide's `queue_it`)."""
    while (request := next_waiting(run)) is not None:
        decision = choose(request)
        try:
            decide(run.user, run.pk, [decision], queue_it=False, via=Via.TERMINAL)
        except DecisionRefused as refusal:
            refused(str(refusal))
        else:
            then(logged_decision(run, request.call_id))


def logged_decision(run: AgentRun, call_id: str) -> Event:
    decided = run.events.filter(kind=ApprovalDecided.kind, data__call_id=call_id)
    kind, data = decided.order_by("-seq").values_list("kind", "data")[0]
    return event_from_dict(kind, data)


def approve(request: ApprovalRequest) -> CallDecision:
    """`--yes`: every call runs as the model asked."""
    return CallDecision(request.call_id, Decision.APPROVE, request.digest)


class LeftWaiting(Exception):
    """The person's input ended (Ctrl-D, a closed terminal) before they decided: the call, and
    the run, still wait."""


@dataclass
class Terminal:
    """The person at the terminal: `read` gives one line of what they type ("" once their input
    ends), `write` shows a line (or a prompt, `ending=""`), `editor` is $EDITOR ("" asks for the
    edited arguments inline, as one line of JSON)."""

    read: Callable[[], str]
    write: Callable[..., None]
    editor: str = ""
    shown: set[str] = field(default_factory=set)
    drafts: dict[str, str] = field(default_factory=dict)  # a call's last edit, refused or not

    def choose(self, request: ApprovalRequest) -> CallDecision:
        if request.call_id not in self.shown:
            self.show(request)
            self.shown.add(request.call_id)
        while True:
            answer = self.ask(f"{request.tool}: approve, edit or deny? [a/e/d] ").strip().lower()
            if answer in APPROVE_WORDS:
                return CallDecision(request.call_id, Decision.APPROVE, request.digest)
            if answer in DENY_WORDS:
                reason = self.ask("Why? (optional; the model reads it) ")
                return CallDecision(request.call_id, Decision.DENY, request.digest, reason=reason)
            if answer in EDIT_WORDS:
                edited = self.edit(request)
                if edited is not None:
                    return CallDecision(
                        request.call_id, Decision.EDIT, request.digest, arguments=edited
                    )
            else:
                self.say("Answer a to approve, e to edit the arguments, d to deny.")

    def refused(self, why: str) -> None:
        self.say(f"Refused: {why}")

    def show(self, request: ApprovalRequest) -> None:
        """The call as the model asked for it: each argument on a line of its own, a text of
        several lines (run_code's code, write_file's content) as a block beneath its name."""
        self.say("")
        self.say(
            f"Run {request.run_id} waits for your decision on {request.tool} ({request.call_id}):"
        )
        if request.why:
            self.say(f"  Why: {request.why}")
        arguments = parsed(request.arguments)
        if not isinstance(arguments, dict):
            self.say(f"  Arguments: {request.arguments}")
            return
        for name, value in arguments.items():
            if isinstance(value, str) and ("\n" in value or name in ("code", "content")):
                self.say(f"  {name}:")
                for line in value.splitlines() or [""]:
                    self.say(f"    {line}")
            else:
                self.say(f"  {name}: {json.dumps(value, ensure_ascii=False)}")

    def edit(self, request: ApprovalRequest) -> str | None:
        """The person's arguments for the call, as JSON; None if they changed nothing (or their
        editor failed): they are asked again."""
        start = self.drafts.get(request.call_id) or pretty(request.arguments)
        if self.editor:
            text = self.in_editor(start)
        else:
            self.say(f"  Now: {one_line(start)}")
            text = self.ask("New arguments (JSON on one line): ")
        if text is None:
            return None
        if parsed(text) is not None and parsed(text) == parsed(request.arguments):
            self.say("The arguments are unchanged: nothing decided.")
            return None
        self.drafts[request.call_id] = text
        return text

    def in_editor(self, start: str) -> str | None:
        """The arguments as the person left them in $EDITOR (run on the terminal)."""
        handle, name = tempfile.mkstemp(prefix="loop-call-", suffix=".json")
        path = Path(name)
        try:
            with os.fdopen(handle, "w") as file:
                file.write(start + "\n")
            try:
                # The person's own $EDITOR, on their own terminal, as git runs it.
                command = [*shlex.split(self.editor), str(path)]
                ended = subprocess.run(command, check=False)  # noqa: S603
            except OSError as error:
                self.say(f"Could not start $EDITOR ({self.editor}): {error}. Nothing decided.")
                return None
            if ended.returncode != 0:
                self.say(f"$EDITOR exited with {ended.returncode}: nothing decided.")
                return None
            return path.read_text()
        finally:
            path.unlink(missing_ok=True)

    def ask(self, prompt: str) -> str:
        self.write(prompt, ending="")
        line = self.read()
        if not line:
            self.say("")
            raise LeftWaiting
        return line.rstrip("\r\n")

    def say(self, line: str) -> None:
        self.write(terminal_safe(line))


def parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return None


def pretty(arguments: str) -> str:
    """Arguments laid out to be edited; a text that is no JSON as it is."""
    value = parsed(arguments)
    return arguments if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def one_line(arguments: str) -> str:
    value = parsed(arguments)
    return arguments if value is None else json.dumps(value, ensure_ascii=False)
