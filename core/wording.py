"""The words and symbols every reader of a run shares (the chat, the console, runagent): one
status-icon vocabulary, so a symbol means the same to a person and to an operator, and how each
says that a run went on after it had stopped."""

from core.events import ContinuedBy, ResumeReason, RunStatus
from core.results import ToolStatus

# A status is always shown as its symbol and a word, never colour alone.
RUN_SYMBOLS = {
    RunStatus.QUEUED: "…",
    RunStatus.RUNNING: "●",
    RunStatus.AWAITING_APPROVAL: "⚑",
    RunStatus.SUCCEEDED: "✓",
    RunStatus.HALTED: "⚠",
    RunStatus.CANCELLED: "■",
    RunStatus.FAILED: "✗",
    RunStatus.INTERRUPTED: "↯",
}
TOOL_SYMBOLS = {
    ToolStatus.OK: "✓",
    ToolStatus.ERROR: "✗",
    ToolStatus.TIMEOUT: "⧗",
    ToolStatus.DENIED: "⛔",
    ToolStatus.SKIPPED: "↷",
    ToolStatus.INTERRUPTED: "↯",
}

# How each reader says a run went on after it had stopped (a run_resumed event). `{who}` is who
# asked for a continue, as that reader addresses them: "you" in the chat and the terminal.
RESUMED_TEXTS = {
    ResumeReason.WORKER_LOST: "Resumed: the worker running this stopped",
    ResumeReason.HANDED_BACK: "Resumed: the worker running this was stopped and handed it back",
    ResumeReason.DATABASE_RESTARTED: "Resumed: the database restarted while this ran",
    ResumeReason.CONTINUED: "Continued: {who} asked it to go on",
    ResumeReason.DECIDED: "Resumed: the calls it waited on were decided",
}
# Who asked, as the console says it and as the run's owner reads it in the chat; None is a log
# from before Loop recorded who asked.
Who = dict[ContinuedBy | None, str]
CONSOLE_WHO: Who = {
    ContinuedBy.OWNER: "the owner",
    ContinuedBy.OPERATOR: "an operator",
    None: "the owner or an operator",
}
OWNERS_WHO: Who = {ContinuedBy.OWNER: "you", ContinuedBy.OPERATOR: "an operator", None: "you"}


def resumed_text(
    reason: ResumeReason | str, by: ContinuedBy | str | None = None, who: Who = CONSOLE_WHO
) -> str:
    """The plain marker a timeline shows where a run went on; a reason from a later version of
    Loop (left as its text by the event loader) reads as its words rather than failing the page."""
    try:
        text = RESUMED_TEXTS[ResumeReason(reason)]
    except ValueError:
        return f"Resumed ({reason.replace('_', ' ')})"
    return text.format(who=who.get(known_asker(by), who[None]))


def known_asker(by: ContinuedBy | str | None) -> ContinuedBy | None:
    """Who asked, as this version of Loop knows them; None for "" (an old log) or a later Loop's
    word (left as its text by the event loader)."""
    try:
        return ContinuedBy(by) if by else None
    except ValueError:
        return None
