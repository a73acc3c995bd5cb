"""The chat's side of tool calls that wait for a person's decision (approvals/): what a
call's card shows of it (run_code's code highlighted, write_file's content and its diff against
the file it would replace), and how the card's forms become the decisions the core checks."""

import difflib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.http import QueryDict
from django.utils import timezone
from django.utils.timesince import timeuntil
from pygments.lexers import DiffLexer, PythonLexer

from agent.models import AgentRun
from approvals.decisions import DecisionRefused, moment_words
from approvals.policy import RUN_CODE, WRITE_FILE, Modes, site_asks, site_modes
from approvals.selectors import deadlines_of
from approvals.waiting import CallDecision
from chat import mcp
from chat.mcp import Hold, McpShown
from chat.texts import Texts
from core.events import ApprovalDecided, ApprovalRequested, Decision, RunStatus
from core.results import ToolStatus
from core.wording import RUN_SYMBOLS, TOOL_SYMBOLS
from workspace.browse import BrowseError, NotFound, open_text
from workspace.directory import workspace_of
from workspace.markup import code_block, highlighted_file, sanitised

# Past this, two texts are not compared (difflib slows down on large files, and a person does
# not read a diff that long): the card shows the new content only.
DIFF_MAX_CHARS = 100_000
# The fields an edit form sends, by what it edits: a tool's one text, or its whole arguments.
CODE, CONTENT, ARGUMENTS = "code", "content", "arguments"
EDITED_FIELDS = {RUN_CODE: CODE, WRITE_FILE: CONTENT}


@dataclass
class Asking:
    """What the cards of waiting calls need beyond their events, read once for a page or a
    frame, and only when a card needs it: the person (whose workspace holds the file a write
    would replace), the site's modes (a tool the site asks about cannot be always allowed) and
    the person's MCP tools (which server a call's tool is of)."""

    user: User

    @cached_property
    def modes(self) -> Modes:
        return site_modes()

    @cached_property
    def workspace(self) -> Path:
        return workspace_of(self.user)

    @cached_property
    def mcp_tools(self) -> dict[str, McpShown]:
        return mcp.tools_of(self.user)

    @cached_property
    def deadlines(self) -> dict[tuple[int, str], datetime]:
        """When each call waiting for the person may no longer be decided, by run and call."""
        return deadlines_of(self.user)

    @cached_property
    def holds(self) -> dict[str, Hold | None]:
        """The holds read so far, by tool name: a page may show several calls of one tool."""
        return {}

    def hold(self, tool: str) -> Hold | None:
        """Where the change holding the person's MCP tool `tool` is reviewed (read once)."""
        if tool not in self.holds:
            self.holds[tool] = mcp.hold_of(self.user, tool)
        return self.holds[tool]

    def mcp_tool(self, tool: str) -> McpShown | None:
        """The person's MCP tool of that name (read only for a name that could be one)."""
        return self.mcp_tools.get(tool) if mcp.is_mcp(tool) else None

    def may_always_allow(self, tool: str) -> bool:
        """Not for a tool the site asks about, nor for one that asks whatever the person allowed
        (an MCP tool its server calls destructive): the choice would change nothing."""
        shown = self.mcp_tool(tool)
        return not site_asks(tool, self.modes) and not (shown and shown.always_ask)


def parsed(arguments: str) -> dict[str, Any] | None:
    """A call's arguments as the object they should be (None: not JSON, or not an object)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def editor_of(tool: str, arguments: str) -> str:
    """What the edit form edits: run_code's code, write_file's content, else the JSON."""
    text_field = EDITED_FIELDS.get(tool)
    values = parsed(arguments)
    if text_field and values is not None and isinstance(values.get(text_field), str):
        return text_field
    return ARGUMENTS


def highlighted_code(code: str) -> str:
    return sanitised(code_block(code, PythonLexer(stripnl=False)))


def request_data(
    run_id: int, event: ApprovalRequested, asking: Asking | None, texts: Texts
) -> dict[str, Any]:
    """What a waiting call's card shows: the call as it would run, until when it may be decided,
    and the edit form's text (none for arguments too long for a card: they are approved or
    denied as they are). Without `asking` (a call decided since), nothing is read beyond the
    event."""
    values = parsed(event.arguments) or {}
    editor = editor_of(event.tool, event.arguments)
    edit_text = values[editor] if editor != ARGUMENTS else pretty(event.arguments)
    shown: dict[str, Any] = {
        "tool": event.tool,
        "icon": RUN_SYMBOLS[RunStatus.AWAITING_APPROVAL],
        "why": event.why,
        "call_id": event.call_id,
        "digest": event.digest,
        "editor": editor,
        "edit_text": edit_text if texts.fits(edit_text) else None,
        "always": asking is not None and asking.may_always_allow(event.tool),
        "mcp": asking.mcp_tool(event.tool) if asking is not None else None,
        "run_id": run_id,
    }
    if asking is not None and (deadline := asking.deadlines.get((run_id, event.call_id))):
        shown["deadline"] = deadline_data(deadline)
    if editor == CODE:
        shown["code_html"] = highlighted_code(texts.shown("arguments", values[CODE]))
    elif editor == CONTENT and isinstance(values.get("path"), str):
        shown["write"] = write_data(values["path"], values[CONTENT], asking, texts)
    else:
        shown["arguments"] = texts.shown("arguments", pretty(event.arguments))
    return shown


def deadline_data(deadline: datetime) -> dict[str, Any]:
    """The card's "Decide by 14:05 UTC (in 3 minutes)"; past it, when the request expired."""
    now = timezone.now()
    return {
        "at": deadline,
        "words": moment_words(deadline),
        "left": timeuntil(deadline, now),
        "passed": deadline < now,
    }


def pretty(arguments: str) -> str:
    values = parsed(arguments)
    if values is None:
        return arguments
    return json.dumps(values, indent=2, ensure_ascii=False)


def write_data(path: str, content: str, asking: Asking | None, texts: Texts) -> dict[str, Any]:
    """write_file's card: the path, the new content, and what it changes in the file there now
    (a missing file is a new file; one the panel cannot open is said so, and not compared)."""
    shown: dict[str, Any] = {
        "path": path,
        "content_html": highlighted_file(texts.shown("arguments", content), path),
    }
    if asking is None:
        return shown
    try:
        existing = open_text(asking.workspace, path)
    except NotFound:
        return shown | {"new": True}
    except BrowseError as error:
        return shown | {"unreadable": error.message}
    if existing.cut or len(existing.text) > DIFF_MAX_CHARS or len(content) > DIFF_MAX_CHARS:
        return shown | {"too_large": True}
    if existing.text == content:
        return shown | {"same": True}
    diff = difflib.unified_diff(
        existing.text.splitlines(keepends=True),
        content.splitlines(keepends=True),
        fromfile=f"{path} (now)",
        tofile=f"{path} (after)",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in diff)
    if not texts.fits(text):
        return shown | {"too_large": True}
    return shown | {"diff_html": sanitised(code_block(text, DiffLexer(stripnl=False)))}


# Each decision's symbol, from the vocabulary every reader shares, and its words.
DECIDED_WORDS = {
    Decision.APPROVE: (TOOL_SYMBOLS[ToolStatus.OK], "Approved"),
    Decision.EDIT: ("✎", "Edited and approved"),
    Decision.DENY: (TOOL_SYMBOLS[ToolStatus.DENIED], "Declined"),
    Decision.EXPIRED: (
        TOOL_SYMBOLS[ToolStatus.TIMEOUT],
        "Expired: nobody decided in time, so it did not run",
    ),
    Decision.CANCELLED: (
        RUN_SYMBOLS[RunStatus.CANCELLED],
        "Cancelled: the run was stopped, so it did not run",
    ),
}


def decided_data(event: ApprovalDecided, asking: Asking | None, texts: Texts) -> dict[str, Any]:
    """A decided call's card: the decision, an edit's arguments, a denial's reason, and who
    decided when it was not the person reading."""
    icon, label = DECIDED_WORDS.get(event.decision, ("?", event.decision.value.capitalize()))
    shown: dict[str, Any] = {
        "tool": event.tool,
        "decision": event.decision.value,
        "icon": icon,
        "label": label,
        "reason": event.reason,
        "mcp": asking.mcp_tool(event.tool) if asking is not None else None,
    }
    if asking is None or event.by != asking.user.get_username():
        shown["by"] = event.by
    elif event.decision == Decision.DENY:
        shown["label"] = "You declined this call"
    if event.decision == Decision.EDIT:
        values = parsed(event.arguments) or {}
        if editor_of(event.tool, event.arguments) == CODE:
            shown["code_html"] = highlighted_code(texts.shown("arguments", values[CODE]))
        else:
            shown["arguments"] = texts.shown("arguments", pretty(event.arguments))
    return shown


# From the card's forms to decisions -------------------------------------------------------------


def decisions_from(form: QueryDict, run: AgentRun) -> list[CallDecision]:
    """The decisions a card's form (one call) or the run's "all" form (every waiting call)
    sends: each call with the digest the person saw. What they decide is checked by the core
    (approvals.decisions.decide), which refuses a call that no longer waits or another digest."""
    calls, digests = form.getlist("call"), form.getlist("digest")
    if not calls or len(calls) != len(digests):
        raise DecisionRefused("Say which call the decision is for: reload the page.")
    try:
        decision = Decision(form.get("decision", ""))
    except ValueError:
        raise DecisionRefused("Approve, edit or deny the call.") from None
    if decision is Decision.EDIT and len(calls) != 1:
        raise DecisionRefused("Edit one call at a time.")
    always = bool(form.get("always")) and decision in (Decision.APPROVE, Decision.EDIT)
    reason = form.get("reason", "") if decision is Decision.DENY else ""
    return [
        CallDecision(
            call_id=call_id,
            decision=decision,
            digest=digest,
            arguments=edited(form, run, call_id) if decision is Decision.EDIT else None,
            reason=reason,
            always=always,
        )
        for call_id, digest in zip(calls, digests, strict=True)
    ]


def edited(form: QueryDict, run: AgentRun, call_id: str) -> str:
    """The arguments an edit form sends, as JSON: the call's own with its one text replaced
    (run_code's code, write_file's content), or the whole JSON as the person wrote it. A
    browser sends a textarea's line breaks as CRLF; the text is the person's with LF."""
    request = run.approvals.filter(call_id=call_id).first()
    if request is None:  # the core says why nothing waits
        return form.get(ARGUMENTS, "")
    editor = editor_of(request.tool, request.arguments)
    text = lf(form.get(editor, ""))
    if editor == ARGUMENTS:
        return text
    values = parsed(request.arguments) or {}
    return json.dumps({**values, editor: text}, ensure_ascii=False)


def lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def card_id(run_id: int, step: int, call_id: str) -> str:
    return f"approval-{run_id}-{step}-{call_id}"
