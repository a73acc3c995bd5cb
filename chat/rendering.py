"""What a person sees of a run: its events as cards, and model output as sanitised HTML.

One card per thing that happened, each drawn by one template partial (chat/cards.html) that the
page, the replay and the live push all use, so a card looks the same however it arrived. Card
ids come from the run and the event, so a card sent twice replaces itself. A card shows at most
SHORT_TEXT_CHARS of any one text (an answer, a reply, a tool's arguments or result), with a note
and a link to the whole text, so no card is too big for the page or for one socket frame.
"""

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.template.backends.django import Template
from django.template.loader import get_template
from django.urls import reverse
from django.utils import timezone

from accounting.ledger import spend_of_run
from accounting.reports import cost_text
from agent.models import AgentRun, Conversation
from agent.selectors import Logged
from approvals.policy import RUN_CODE
from chat import approvals, mcp
from chat.approvals import Asking
from chat.streamed import markdown_so_far, settled_end
from chat.texts import SHORT_TEXT_CHARS, Texts
from core.approval import Denial, denial_in
from core.events import (
    BREAKER_REASONS,
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    EndCause,
    Event,
    HaltReason,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    Unreadable,
)
from core.results import Remedy, ToolStatus
from core.wording import OWNERS_WHO, RUN_SYMBOLS, TOOL_SYMBOLS, resumed_text
from mcp_servers.results import said_in
from tools.code import Report, parse_report
from workspace.browse import BrowseError, file_components
from workspace.markup import markdown

LONG_OUTPUT_LINES = 12
LONG_OUTPUT_CHARS = 1200

# Keyed by the value a log or a row stores (a str: a StrEnum member is its value).
HALT_REASONS: dict[str, str] = {
    HaltReason.TOOL_FAILURES: "the same tool failed too many times in a row",
    HaltReason.REPEATED_FAILED_CALL: "the model repeated a call that had already failed",
    HaltReason.IDENTICAL_CALLS: "the model made the same call over and over",
    HaltReason.ITERATION_CAP: "it reached its cap on model turns",
    HaltReason.DEADLINE: "it ran out of time",
    HaltReason.TOKEN_BUDGET: "it used up its token budget",
    HaltReason.TOOL_CALL_BUDGET: "it used up its budget of tool calls",
    HaltReason.NO_DECISION: "nobody decided in time whether a call it waited on may run",
    HaltReason.QUOTA: "you reached a quota of yours over a period",
}
# The chat's words for a run's status; its symbols are the console's too (core.wording).
STATUS_WORDS: dict[str, str] = {
    RunStatus.QUEUED: "Waiting for a worker",
    RunStatus.RUNNING: "Running",
    RunStatus.AWAITING_APPROVAL: "Waiting for your decision",
    RunStatus.SUCCEEDED: "Done",
    RunStatus.HALTED: "Halted",
    RunStatus.CANCELLED: "Stopped",
    RunStatus.FAILED: "Failed",
    RunStatus.INTERRUPTED: "Interrupted",
}
# The tools whose `path` names one file of the workspace, which their card links to.
FILE_TOOLS = frozenset({"read_file", "write_file"})
NO_RUN = {"status": "none", "icon": "○", "label": "No runs yet"}
UNKNOWN_SYMBOL = "?"  # a status from a later version of Loop
RUN_SYMBOL_OF: dict[str, str] = dict(RUN_SYMBOLS.items())  # by the status a row stores
RUNNING_CALL = {"status": "running", "icon": "…", "label": "Running"}  # a call not yet finished
STOPPED_CALL = {"status": "stopped", "icon": RUN_SYMBOLS[RunStatus.CANCELLED], "label": "Stopped"}
# A call refused because its tool is on hold for review: a warning, not a failure of the tool.
HELD_CALL = {"status": "held", "icon": "⚠", "label": "On hold"}
# A run that did its work without a tool it wanted, on hold: not a plain green Done.
HELD_END = {"status": "held", "icon": "⚠"}
FAILED_CALL_SYMBOL = TOOL_SYMBOLS[ToolStatus.ERROR]  # a call status from a later version of Loop
NEXT_STEPS = {
    RunStatus.FAILED: "Send the task again; if it keeps failing, rephrase it or try a smaller "
    "step. If the model provider is down, try again later.",
    RunStatus.INTERRUPTED: "It stopped before the end. Continue it to go on from where it "
    "stopped, or send the task again to start over.",
    RunStatus.HALTED: "Loop stopped it to protect your budget. Continue it to go on with a fresh "
    "set of limits, or refine the task and send it again.",
    RunStatus.CANCELLED: "Continue it to go on from where it stopped, or send a new task.",
}
# A breaker halt: going on unchanged would fail the same way, and the breaker halts it at once.
BREAKER_STEP = (
    "Continuing without changing what made it fail halts it again at once: fix that first (say, "
    "create the missing file, or tell it another way in a new task), then Continue."
)
# What happened, as an end's banner opens: the status's word and the run's own why.
STOPPED_TEXT = "Stopped before it finished."
# A run the provider was too slow for halts on its deadline: the provider's fault, not the task's.
SLOW_PROVIDER_STEP = (
    "The model provider did not answer in time. Continue it later, or ask this site's operators "
    "to give runs more time."
)


MODEL_DOWN_STEP = (
    "Try again in a few minutes: Continue it once the provider is back, to go on from where it "
    "stopped. Your progress is kept."
)
# What a person reads of how a run failed or was interrupted, by its cause: never its error,
# which names the settings, commands and addresses an operator acts on (the console shows it).
FAILED_TEXTS = {
    EndCause.MODEL_DOWN: "The assistant's model is not answering.",
    EndCause.INTERNAL_ERROR: "Something went wrong on this site's side.",
    EndCause.COULD_NOT_START: "It could not start: this site's set-up has a problem its "
    "operators need to fix.",
    EndCause.TOO_MANY_RESUMES: "The server working on it stopped under it too many times, so it "
    "was given up.",
}
INTERRUPTED_TEXT = "The server working on it stopped before it finished."
# The model answered with what it can do, not the task (the mock's help): a success at nothing.
ONLY_HELP_BANNER = {
    "what": "Not done: this site's demo model cannot do this task.",
    "next": "Put it like one of the kinds of task it lists, or ask this site's operators for a "
    "full model.",
    "tone": "warn",
}
ONLY_HELP_LABEL = {"status": "not-done", "icon": "∅", "label": "Not done"}


# A quota halt: Continue is refused until the quota resets, at the time its detail says.
QUOTA_STEP = (
    "Your progress is kept. Continue it once the quota resets, at the time above, or ask this "
    "site's operators for a larger quota."
)


def next_step(end: RunFinished) -> str:
    """What a person can do about how a run ended."""
    if end.cause is EndCause.MODEL_TOO_SLOW:
        return SLOW_PROVIDER_STEP
    if end.cause is EndCause.MODEL_DOWN:
        return MODEL_DOWN_STEP  # such a run may be continued (AgentRun.can_continue)
    if end.status == RunStatus.HALTED and end.halt_reason in BREAKER_REASONS:
        return BREAKER_STEP
    if end.status == RunStatus.HALTED and end.halt_reason == HaltReason.QUOTA:
        return QUOTA_STEP
    return NEXT_STEPS.get(end.status, "")


def what_happened(end: RunFinished) -> str:
    """How the run ended, in a sentence: a halt's why (its detail, or its reason for a log from
    before the end carried it), a failure's error."""
    match end.status:
        case RunStatus.HALTED:
            why = end.detail or (f"{reason_text(end.halt_reason)}." if end.halt_reason else "")
            return f"Halted: {why}" if why else "Halted."
        case RunStatus.CANCELLED:
            return STOPPED_TEXT
        case RunStatus.FAILED:
            failure = FAILED_TEXTS.get(end.cause) if end.cause else None
            return f"Failed: {failure}" if failure else "Failed."
        case RunStatus.INTERRUPTED:
            return f"Interrupted: {INTERRUPTED_TEXT}"
    return ""


def end_banner(end: RunFinished) -> dict[str, str] | None:
    """The one banner a run's end shows: what happened and what the person can do about it.
    None for a run that succeeded (its answer says it all), unless it did nothing of the task."""
    if end.status == RunStatus.SUCCEEDED:
        return ONLY_HELP_BANNER if end.cause is EndCause.ONLY_HELP else None
    tone = "bad" if end.status in (RunStatus.FAILED, RunStatus.INTERRUPTED) else "warn"
    return {"what": what_happened(end), "next": next_step(end), "tone": tone}


def status_label(status: str | None) -> dict[str, str]:
    """How a run's status shows: an icon and a word, never colour alone. None: no run yet."""
    if status is None:
        return NO_RUN
    icon = RUN_SYMBOL_OF.get(status, UNKNOWN_SYMBOL)
    return {"status": status, "icon": icon, "label": STATUS_WORDS.get(status, status)}


def end_label(end: RunFinished) -> dict[str, str]:
    """A run's end as its answer's header shows it: its status, but never a success's tick
    for a run that did nothing of its task."""
    if end.status == RunStatus.SUCCEEDED and end.cause is EndCause.ONLY_HELP:
        return ONLY_HELP_LABEL
    return status_label(end.status)


def labelled(conversation: Conversation) -> Conversation:
    """The conversation with its icon and word (`status`), from its `last_status` and
    `last_cause` (agent.selectors.with_last_status): a run that did nothing of its task is not
    shown done, as its answer's header says."""
    status = getattr(conversation, "last_status", None)
    only_help = getattr(conversation, "last_cause", "") == EndCause.ONLY_HELP
    # The template's word for it: an attribute the model does not declare.
    conversation.status = (  # type: ignore[attr-defined]
        ONLY_HELP_LABEL if status == RunStatus.SUCCEEDED and only_help else status_label(status)
    )
    return conversation


@dataclass(frozen=True)
class Card:
    """One card of the timeline: which partial draws it, its element id, what it shows.

    `replaces` marks a card that takes the place of an earlier one with the same id (a tool
    call's result replaces its "running" card) rather than being added at the end.
    """

    partial: str
    id: str
    data: dict[str, Any] = field(default_factory=dict)
    replaces: bool = False

    @property
    def template(self) -> str:
        return f"chat/cards.html#{self.partial}"


def card_for(
    run_id: int, seq: int, event: Event | Unreadable, asking: Asking | None = None
) -> Card | None:
    """The card for one event, or None for an event a person need not see (the task, RunStarted,
    shows as the person's own bubble) or one this version cannot read (a later Loop's).
    `asking`: the person reading, for what a waiting call's card reads beyond its event (the
    file a write would replace); without it, the card shows the event alone."""
    texts = Texts(run_id, seq)
    card = event_card(run_id, seq, event, texts, asking)
    if card is not None and texts.cuts:
        card.data["cuts"] = texts.cuts
    return card


def event_card(
    run_id: int, seq: int, event: Event | Unreadable, texts: Texts, asking: Asking | None
) -> Card | None:
    card_id = f"ev-{run_id}-{seq}"
    match event:
        case ApprovalRequested() | ApprovalDecided():
            return approval_card(run_id, event, texts, asking)
        case MemoriesRecalled(memories=memories):
            best = max((memory.score for memory in memories), default=0)
            shown = {"memories": memories, "best": best, "url": recalled_url(run_id)}
            return Card("memories", card_id, shown)
        case ModelReplied(tool_calls=calls, text=text, reasoning=reasoning) if calls and (
            text or reasoning
        ):
            # A reply without tool calls is the answer, which the run's end shows.
            return Card(
                "model",
                card_id,
                {
                    "html": markdown(texts.shown("text", text)),
                    "reasoning": texts.shown("reasoning", reasoning),
                },
            )
        case ToolCallStarted() | ToolCallFinished():
            finished = isinstance(event, ToolCallFinished)
            return Card(
                "tool",
                f"call-{run_id}-{event.step}-{event.call_id}",
                tool_data(event, texts) | mcp_data(event, asking) | {"run_id": run_id},
                replaces=finished,
            )
        case BreakerTripped() | RunHalted():
            return None  # the run's end says why it halted, in its one banner (end_banner)
        case PersonSaid():
            return Card("said", card_id, {"text": texts.shown("text", event.text)})
        case RunResumed():
            # The person reading the chat owns the run: a continue is theirs.
            text = resumed_text(event.reason, event.by, who=OWNERS_WHO)
            return Card("marker", card_id, {"text": text})
        case RunFinished():
            held = held_end(event, asking)
            return Card(
                "answer",
                card_id,
                {
                    **answer_text(texts.shown("answer", event.answer)),
                    # A run that succeeded has no banner; its error is a note (a cut answer).
                    "error": event.error if event.status == RunStatus.SUCCEEDED else "",
                    "banner": end_banner(event),
                    **end_label(event),
                    **(held_label(held) if held and event.status == RunStatus.SUCCEEDED else {}),
                    "held": held,
                    **run_cost(run_id, event),
                },
            )
    return None


def run_cost(run_id: int, end: RunFinished) -> dict[str, str]:
    """The run's tokens and cost for its answer's footer, when the operators show costs
    (LOOP_SHOW_COST): the ledger's sum of the run's turns so far, "price unknown" when one had
    no price. Nothing otherwise: people see no money unless the site says so."""
    if not settings.LOOP_SHOW_COST:
        return {}
    tokens = end.prompt_tokens + end.completion_tokens
    cost = cost_text(spend_of_run(run_id)) or "no cost"
    return {"tokens": f"{tokens} token{'s' * (tokens != 1)}", "cost": cost}


def answer_text(shown: str) -> dict[str, str]:
    """An answer as its card shows it, and its Markdown, which copying it copies: a list's
    numbers, a code block's fence and a table's pipes survive a paste, as its text would not."""
    return {"html": markdown(shown), "markdown": shown}


def approval_card(
    run_id: int,
    event: ApprovalRequested | ApprovalDecided,
    texts: Texts,
    asking: Asking | None,
) -> Card:
    """A call waiting for its person's decision, with the forms to decide it; once decided, the
    same card with the decision in their place."""
    card_id = approvals.card_id(run_id, event.step, event.call_id)
    if isinstance(event, ApprovalDecided):
        shown = approvals.decided_data(event, asking, texts)
        return Card("approval", card_id, shown, replaces=True)
    return Card("approval", card_id, approvals.request_data(run_id, event, asking, texts))


def reason_text(reason: HaltReason | str) -> str:
    """A halt's reason in words; one from a later version of Loop (its plain text) as its words."""
    return HALT_REASONS.get(reason) or reason.replace("_", " ")


def tool_data(event: ToolCallStarted | ToolCallFinished, texts: Texts) -> dict[str, Any]:
    code, arguments = shown_arguments(event.arguments)
    shown: dict[str, Any] = {
        "tool": event.tool,
        "code": texts.shown("arguments", code) if code else "",
        "arguments": texts.shown("arguments", arguments) if arguments else "",
    }
    if not isinstance(event, ToolCallFinished):
        return shown | RUNNING_CALL
    worked = event.status == ToolStatus.OK
    output = shown_output(event, texts)
    return (
        shown
        | call_status(event)
        | output
        | {
            "file": file_link(event.tool, event.arguments) if worked else None,
            "long": is_long(output["text"]),
            "milliseconds": round(event.duration * 1000),
            "policy": event.policy,
            "truncated": event.truncated or output["truncated"],
        }
    )


def is_long(text: str) -> bool:
    return text.count("\n") >= LONG_OUTPUT_LINES or len(text) > LONG_OUTPUT_CHARS


def shown_output(event: ToolCallFinished, texts: Texts) -> dict[str, Any]:
    """What a finished call's card shows of its result: the output itself, not the text the
    model read around it. That text is read back, here alone, by its writer's own reader
    (run_code's report, an MCP answer's envelope, a denial); when the output differs from it,
    the card keeps it (`raw`) behind a disclosure. The log keeps what the model read."""
    raw = texts.shown("text", event.text)  # a whole text over the card's size: noted, linked
    shown = {"text": raw, "note": "", "exit": "", "stderr": "", "quiet": False, "truncated": False}
    if event.tool == RUN_CODE and (report := parse_report(event.text)) is not None:
        shown |= {
            "text": texts.head(report.stdout),
            "stderr": texts.head(report.stderr),
            "note": sentence(report.lead),
            # A killed snippet's note (a timeout, a Stop, its memory) already says it was killed.
            "exit": "" if report.lead and report.exit_status is None else exit_words(report),
            "quiet": not report.stdout and not report.stderr,
            "truncated": report.output_truncated,
        }
    elif event.status == ToolStatus.DENIED and (denial := denial_in(event.text)) is not None:
        # The decision's card says who declined it and why; the model's wording adds nothing.
        return shown | {"text": declined_words(denial), "raw": ""}
    elif (said := said_in(event.text)) is not None:  # an MCP tool's answer, or its error
        shown["text"] = texts.head(said)
    return shown | {"raw": raw if shown["text"] != raw else ""}


def exit_words(report: Report) -> str:
    """A snippet's exit status, said only when it is not the 0 of a program that ended well."""
    if report.exit_status == 0:
        return ""
    if report.exit_status is None:
        return "It was killed before it ended."
    return f"Exit status {report.exit_status}"


def declined_words(denial: Denial) -> str:
    who = "Declined by an operator of this site" if denial.operator else "You declined this call"
    return f"{who}: {denial.reason}" if denial.reason else f"{who}."


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def held_end(end: RunFinished, asking: Asking | None) -> dict[str, Any] | None:
    """What a run's end says of the tools it wanted that were on hold for review (None: it
    wanted none): their names, whether any is the person's to review, and where."""
    if not end.on_hold:
        return None
    holds = [(name, asking.hold(name) if asking is not None else None) for name in end.on_hold]
    urls = [hold.review_url for _, hold in holds if hold is not None and hold.yours]
    return {
        "names": [
            f"{hold.shown.server} · {hold.shown.tool}" if hold else name for name, hold in holds
        ],
        "yours": bool(urls),
        "url": urls[0] if urls else "",
    }


def held_label(held: dict[str, Any]) -> dict[str, str]:
    """The end line of a run that succeeded without a tool on hold: a warning, whose review."""
    label = "Held for your review" if held["yours"] else "Held for review"
    return HELD_END | {"label": label}


def mcp_data(event: ToolCallStarted | ToolCallFinished, asking: Asking | None) -> dict[str, Any]:
    """An MCP tool's call, for a card drawn for its person: its server and tool by name, and
    once it ended, the images its answer kept in their workspace, or, when Loop refused it for a
    grant to renew, the way to reconnect, or for a tool on hold, where its change is reviewed.
    Nothing for any other call."""
    if isinstance(event, ToolCallFinished) and event.remedy is Remedy.REVIEW:
        hold = asking.hold(event.tool) if asking is not None else None
        return {"hold": hold, "mcp": hold.shown} if hold is not None else {}
    shown = asking.mcp_tool(event.tool) if asking is not None else None
    if shown is None:
        return {}
    data: dict[str, Any] = {"mcp": shown}
    if isinstance(event, ToolCallFinished):
        data["images"] = mcp.saved_images(event.saved)
        if event.remedy is Remedy.RECONNECT:
            data["reconnect"] = mcp.reconnect_url()
    return data


def call_status(event: ToolCallFinished) -> dict[str, str]:
    """A finished call's status as its card shows it: one the run's Stop cut short (a snippet it
    killed) is stopped, with the symbol of a stopped run, not an error."""
    if event.stopped:
        return STOPPED_CALL
    if event.remedy is Remedy.REVIEW:
        return HELD_CALL
    declined = event.status == ToolStatus.DENIED and denial_in(event.text) is not None
    return {
        "status": event.status,
        "icon": TOOL_SYMBOLS.get(event.status, FAILED_CALL_SYMBOL),
        "label": "Declined" if declined else event.status.capitalize(),
    }


def recalled_url(run_id: int) -> str:
    """The Memories page showing the memories a run recalled (those still stored)."""
    return reverse("memories") + "?" + urlencode({"run": run_id})


def file_link(tool: str, raw_arguments: str) -> dict[str, str] | None:
    """The file a read_file or write_file call worked on, as its card links to it in the Files
    panel: its path as the file tools read it, and its URL. None for any other tool, and for a
    path the file tools or the panel refuse (`..`, absolute, a control or bidi character, the
    workspace itself): no link leads out, and none to what the panel would not open."""
    if tool not in FILE_TOOLS:
        return None
    try:
        arguments = json.loads(raw_arguments)
    except ValueError:
        return None
    path = arguments.get("path") if isinstance(arguments, dict) else None
    if not isinstance(path, str):
        return None
    try:
        inside = "/".join(file_components(path))
    except BrowseError:
        return None
    return {"path": inside, "url": reverse("files_view", args=[inside])}


def shown_arguments(raw: str) -> tuple[str, str]:
    """run_code's code on its own; any other arguments as indented JSON (or as sent, if bad)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return "", raw
    if isinstance(parsed, dict) and set(parsed) == {"code"} and isinstance(parsed["code"], str):
        return parsed["code"], ""
    return "", json.dumps(parsed, indent=2, ensure_ascii=False)


def pruned_cards(run: AgentRun) -> list[Card]:
    """A run whose log the retention pruned (agent/retention.py): a note saying so where its
    steps were, then its end as the run's row keeps it."""
    when = timezone.localtime(run.log_pruned_at).strftime("%Y-%m-%d")
    note = f"Log pruned on {when}: this run's steps are no longer kept."
    end = {
        **answer_text(run.answer[:SHORT_TEXT_CHARS]),
        # As on any end: a success's note (a cut answer), never a failure's operator detail.
        "error": run.error if run.status == RunStatus.SUCCEEDED else "",
        **status_label(run.status),
    }
    return [
        Card("pruned", f"pruned-{run.pk}", {"text": note}),
        Card("answer", f"end-{run.pk}", end),
    ]


def asking_of(
    events: Sequence[Logged], asking: Asking | None
) -> Callable[[Event | Unreadable], Asking | None]:
    """`asking` for the cards of calls still waiting among `events`: a call decided within them
    is drawn from its event alone (its decision takes its card's place at once)."""
    decided = {
        (event.step, event.call_id) for _, event in events if isinstance(event, ApprovalDecided)
    }

    def asking_for(event: Event | Unreadable) -> Asking | None:
        if isinstance(event, ApprovalRequested) and (event.step, event.call_id) in decided:
            return None
        return asking

    return asking_for


def page_cards(run_id: int, events: Sequence[Logged], asking: Asking | None = None) -> list[Card]:
    """A run's cards as the page shows them at first: each later card in its earlier's place.
    Drawn where they belong, none is an out-of-band swap: in a whole turn that htmx swaps in (a
    continued run's), such a card would be taken out of the turn to replace its old self."""
    asking_for = asking_of(events, asking)
    cards: list[Card] = []
    at: dict[str, int] = {}
    for seq, event in events:
        card = card_for(run_id, seq, event, asking_for(event))
        if card is None:
            continue
        card = replace(card, replaces=False)
        if card.id in at:
            cards[at[card.id]] = card
        else:
            at[card.id] = len(cards)
            cards.append(card)
    return cards


@functools.cache
def partial(name: str) -> Template:
    """A partial of chat/cards.html, looked up and compiled once: the socket draws one for every
    piece of every reply it streams."""
    template = get_template(f"chat/cards.html#{name}")
    if not isinstance(template, Template):  # never: the site has Django's template engine only
        raise TypeError(f"chat/cards.html#{name} is not a Django template.")
    return template


def draw(name: str, **context: Any) -> str:
    """The partial `name` drawn with `context` (escaped as every template is)."""
    return partial(name).render(context)


def render_card(card: Card) -> str:
    return draw(card.partial, card=card)


def in_steps(run_id: int, content: str) -> str:
    """Drawn content (a card) added at the end of the run's steps, out of band."""
    return draw("steps", run_id=run_id, content=content)


# The sockets of a process watching one run each draw the same text of its streamed reply:
# the first draws it, the others reuse it. A reply's text is at most SHORT_TEXT_CHARS here.
@functools.lru_cache(maxsize=64)
def streaming_card(run_id: int, step: int, text: str) -> tuple[str, int]:
    """The card a reply is streamed into, at the end of the steps, with its text so far; and
    where the settled part it drew ends."""
    end = settled_end(text)
    card = draw("streaming", **streamed_parts(run_id, step, text, 0, end))
    return in_steps(run_id, card), end


@functools.lru_cache(maxsize=64)
def streamed_text(run_id: int, step: int, text: str, settled: int) -> tuple[str, int]:
    """A streamed reply's text so far, in its card: what settled since the card's `settled`
    first characters added to them, and the rest drawn again; and where the settled part ends
    now."""
    end = settled_end(text, settled)
    parts = streamed_parts(run_id, step, text, settled, end)
    return draw("streamed_text", oob=True, **parts), end


def streamed_parts(run_id: int, step: int, text: str, settled: int, end: int) -> dict[str, Any]:
    """The HTML of what settled between `settled` and `end`, and of what is written after."""
    return {
        "run_id": run_id,
        "step": step,
        "settled": markdown(text[settled:end]) if end > settled else "",
        "writing": markdown_so_far(text[end:]),
        "after_settled": end > 0,
    }


def streamed_removal(run_id: int, step: int) -> str:
    """Takes a streamed card away (the stored reply of its step now shows)."""
    return draw("streamed_removal", run_id=run_id, step=step)
