"""One conversation exported by its owner, from its menu in the sidebar: as JSON
(loop.conversation/1) or as Markdown to read, each with every turn's steps as the person saw
them (their task, what the model said between tools, each tool call with its arguments and
output as its card shows it, the decisions on calls that waited, the answer), in order.

A conversation with edited or regenerated turns has branches: the export holds the branch the
conversation shows (each turn's version chosen last) and names the other versions of a turn by
run id; the whole of every run, all branches, is in My data's export. The runs and their logs are
read as My data and the console read them (agent.transcripts): two queries, whatever the length.
"""

import re
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.text import slugify

from agent import selectors
from agent.models import Conversation
from agent.transcripts import transcripts
from chat.rendering import shown_output, what_happened
from chat.texts import Texts
from core.events import (
    ApprovalDecided,
    Event,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunHalted,
    RunStatus,
    ToolCallFinished,
    Unreadable,
    loaded,
)

EXPORT_FORMAT = "loop.conversation/1"
BRANCH_NOTE = (
    "The conversation as it is shown: each turn's version chosen last. Other versions of a turn "
    "are named by run id in other_versions; all of them are in the export of all your data."
)
READ_BRANCH_NOTE = (
    "The conversation as it is shown: each turn's version chosen last. A turn's other versions "
    "are named by run number; all of them are in the export of all your data (My data)."
)
# How long a conversation's title may be in the file's name.
SLUG_CHARS = 50


def when(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def file_name(conversation: Conversation, extension: str) -> str:
    """A name safe on any system: ASCII letters, digits and hyphens, the id keeping it apart."""
    slug = slugify(conversation.title)[:SLUG_CHARS].strip("-") or "conversation"
    return f"loop-{conversation.pk}-{slug}.{extension}"


def conversation_export(conversation: Conversation, user: User) -> dict[str, Any]:
    """The conversation and the turns of its chosen branch, oldest first, each with its steps.
    Only the user's own runs, whatever else a conversation may come to hold."""
    turns = selectors.turns_of(conversation.pk)
    path = [run_id for run_id, _ in selectors.chosen_path(turns)]
    versions: dict[int | None, list[int]] = {}
    for turn in turns:
        versions.setdefault(turn.parent, []).append(turn.id)
    parent_of = {turn.id: turn.parent for turn in turns}
    found = {
        transcript["run"]["id"]: transcript
        for transcript in transcripts(conversation.runs.filter(user=user, pk__in=path))
    }
    return {
        "format": EXPORT_FORMAT,
        "id": conversation.pk,
        "title": conversation.title,
        "created_at": when(conversation.created_at),
        "updated_at": when(conversation.updated_at),
        "pinned": conversation.pinned_at is not None,
        "archived": conversation.archived_at is not None,
        "exported_at": when(timezone.now()),
        "branch": "chosen",
        "branch_note": BRANCH_NOTE,
        "turns": [
            turn_of(found[run_id], [v for v in versions[parent_of[run_id]] if v != run_id])
            for run_id in path
            if run_id in found
        ],
    }


def turn_of(transcript: dict[str, Any], others: list[int]) -> dict[str, Any]:
    run = transcript["run"]
    events = [loaded(event["kind"], event["data"]) for event in transcript["events"]]
    texts = Texts(run["id"], 0, limit=None)  # an export holds every output whole
    return {
        "run": run["id"],
        "task": run["task"],
        "status": run["status"],
        "answer": run["answer"],
        "error": error_said(events),
        "model": run["model"],
        "created_at": run["created_at"],
        "finished_at": run["finished_at"],
        "other_versions": others,
        "steps": [step for event in events if (step := step_of(event, texts)) is not None],
    }


def error_said(events: list[Event | Unreadable]) -> str:
    """How the run ended short, as its card says it: a failed run's error names the settings,
    commands and addresses an operator acts on (the console shows it), never for a person's
    file. A run that succeeded keeps its note (an answer cut short), as its card does."""
    end = next((event for event in events if isinstance(event, RunFinished)), None)
    if end is None:
        return ""
    return end.error if end.status == RunStatus.SUCCEEDED else what_happened(end)


def step_of(event: Event | Unreadable, texts: Texts) -> dict[str, Any] | None:
    """What the person saw of one event of the log, or None for what they did not see (the
    run's start, the model's usage, a tool call that has not finished yet). A tool call holds
    its output as its card shows it, and the text the model read (`result`) beside it."""
    match event:
        case PersonSaid():
            return {"kind": "you_said", "text": event.text}
        case MemoriesRecalled():
            return {"kind": "memories_recalled", "memories": [m.text for m in event.memories]}
        case ModelReplied() if event.tool_calls and event.text.strip():
            return {"kind": "model_said", "text": event.text}
        case ApprovalDecided():
            decided = {"kind": "decision", "tool": event.tool, "decision": event.decision}
            return decided | ({"reason": event.reason} if event.reason else {})
        case ToolCallFinished():
            return {
                "kind": "tool_call",
                "tool": event.tool,
                "arguments": event.arguments,
                "status": event.status,
                "output": output_of(event, texts),
                "result": event.text,
                "truncated": event.truncated,
            }
        case RunHalted():
            return {"kind": "halted", "reason": event.reason, "detail": event.detail}
    return None


def output_of(event: ToolCallFinished, texts: Texts) -> dict[str, str]:
    """A call's output as its card shows it (chat.rendering reads it): what it printed, what it
    printed to stderr, and a sentence on how it ended, each empty when there is none."""
    shown = shown_output(event, texts)
    ended = " ".join(words for words in (shown["note"], shown["exit"]) if words)
    return {"text": shown["text"], "stderr": shown["stderr"], "ended": ended}


# Markdown ------------------------------------------------------------------------------------


def fenced(text: str, language: str = "") -> str:
    """A code block that holds `text` whole: its fence longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def as_markdown(export: dict[str, Any]) -> str:
    """The export to read: a heading per turn, its steps in order, tool output in code blocks."""
    title = export["title"] or "New conversation"
    exported = export["exported_at"][:16].replace("T", " ")
    lines = [f"# {title}", "", f"Exported from Loop, {exported} UTC.", ""]
    lines += [f"_{READ_BRANCH_NOTE}_", ""]
    for number, turn in enumerate(export["turns"], start=1):
        lines += [f"## {number}. You", "", turn["task"], ""]
        if turn["other_versions"]:
            others = ", ".join(str(pk) for pk in turn["other_versions"])
            runs = "run" if len(turn["other_versions"]) == 1 else "runs"
            lines += [f"_Other versions of this turn: {runs} {others}._", ""]
        for step in turn["steps"]:
            lines += [*step_lines(step), ""]
        if turn["answer"]:
            lines += ["### Loop", "", turn["answer"], ""]
        elif turn["error"]:
            lines += [f"_The run ended without an answer ({turn['status']}): {turn['error']}_", ""]
    return "\n".join(lines).rstrip() + "\n"


def step_lines(step: dict[str, Any]) -> list[str]:
    match step["kind"]:
        case "you_said":
            return [f"**You, while Loop worked:** {step['text']}"]
        case "memories_recalled":
            return [f"_Recalled: {'; '.join(step['memories'])}_"]
        case "model_said":
            return [step["text"]]
        case "decision":
            reason = f": {step['reason']}" if step.get("reason") else ""
            return [f"_{step['tool']}: {step['decision']}{reason}_"]
        case "tool_call":
            cut = " (shortened)" if step["truncated"] else ""
            return [
                f"**{step['tool']}** ({step['status']}{cut})",
                "",
                fenced(step["arguments"], "json"),
                *output_lines(step["output"]),
            ]
        case "halted":
            return [f"_Stopped early ({step['reason']}): {step['detail']}_"]
    return []


def output_lines(output: dict[str, str]) -> list[str]:
    """A call's output as its card shows it: what it printed, its errors only when there are
    some, and how it ended only when that is worth a word (a failed or killed snippet)."""
    lines = ["", fenced(output["text"])] if output["text"] else []
    if output["stderr"]:
        lines += ["", "What it printed to stderr:", "", fenced(output["stderr"])]
    if output["ended"]:
        lines += ["", f"_{output['ended']}_"]
    return lines or ["", "_It printed nothing._"]
