"""What a person sees of a run: its events as cards, and model output as sanitised HTML.

One card per thing that happened, each drawn by one template partial (chat/cards.html) that the
page, the replay and the live push all use, so a card looks the same however it arrived. Card
ids come from the run and the event, so a card sent twice replaces itself. A card shows at most
SHORT_TEXT_CHARS of any one text (an answer, a reply, a tool's arguments or result), with a note
and a link to the whole text, so no card is too big for the page or for one socket frame.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import nh3
from django.template.loader import render_to_string
from django.urls import reverse
from markdown_it import MarkdownIt

from agent.events import HaltReason, RunStatus
from agent.loop import MODEL_FAILED
from agent.wording import OWNERS_WHO, resumed_text

# Raw HTML in Markdown is shown as text; nh3 then keeps only these tags and link schemes, so a
# <script>, an onerror= or a javascript: link in model output can never run.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
ALLOWED_TAGS = {
    "p", "br", "strong", "em", "code", "pre", "blockquote", "ul", "ol", "li", "a", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "del",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
LONG_OUTPUT_LINES = 12
LONG_OUTPUT_CHARS = 1200
# Even Markdown's most expanding input (a list item per line) renders 10 000 characters as some
# 200 KB of HTML: under the socket's frame bound (chat/consumers.py's FRAME_BYTES).
SHORT_TEXT_CHARS = 10_000
# The texts of an event a card may shorten: a key of the event's data, and what the note calls it.
EVENT_TEXTS = {
    "answer": "answer",
    "text": "text",
    "reasoning": "reasoning",
    "arguments": "arguments",
}

HALT_REASONS = {
    HaltReason.TOOL_FAILURES: "the same tool failed too many times in a row",
    HaltReason.REPEATED_FAILED_CALL: "the model repeated a call that had already failed",
    HaltReason.IDENTICAL_CALLS: "the model made the same call over and over",
    HaltReason.ITERATION_CAP: "it reached its cap on model turns",
    HaltReason.DEADLINE: "it ran out of time",
    HaltReason.TOKEN_BUDGET: "it used up its token budget",
    HaltReason.TOOL_CALL_BUDGET: "it used up its budget of tool calls",
}
STATUS_LABELS = {
    RunStatus.QUEUED: ("…", "Waiting for a worker"),
    RunStatus.RUNNING: ("●", "Running"),
    RunStatus.SUCCEEDED: ("✓", "Done"),
    RunStatus.HALTED: ("⚠", "Halted"),
    RunStatus.CANCELLED: ("■", "Stopped"),
    RunStatus.FAILED: ("✗", "Failed"),
    RunStatus.INTERRUPTED: ("!", "Interrupted"),
}
NEXT_STEPS = {
    RunStatus.FAILED: "Send the task again; if it keeps failing, rephrase it or try a smaller "
    "step. If the model provider is down, try again later.",
    RunStatus.INTERRUPTED: "It stopped before the end. Continue it to go on from where it "
    "stopped, or send the task again to start over.",
    RunStatus.HALTED: "Loop stopped it to protect your budget. Continue it to go on with a fresh "
    "set of limits, or refine the task and send it again.",
}
# The events the page draws no card for: the task shows as the person's own bubble.
UNDRAWN_KINDS = frozenset({"run_started"})
# A deadline halt with an error is the provider's fault (agent.loop records why), not the task's.
SLOW_PROVIDER_STEP = (
    "The model provider did not answer in time. Continue it later, or ask the operator to raise "
    "LOOP_RUN_SECONDS."
)


MODEL_DOWN_STEP = (
    "The model provider did not answer. Continue it once the provider is back, to go on from "
    "where it stopped."
)


def next_step(data: dict[str, Any]) -> str:
    """What a person can do about how a run ended, from its run_finished event."""
    if data.get("halt_reason") == HaltReason.DEADLINE and data.get("error"):
        return SLOW_PROVIDER_STEP
    if data["status"] == RunStatus.FAILED and data.get("error", "").startswith(MODEL_FAILED):
        return MODEL_DOWN_STEP  # such a run may be continued (AgentRun.can_continue)
    return NEXT_STEPS.get(RunStatus(data["status"]), "")


def markdown(text: str) -> str:
    html = _markdown.render(text)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def status_label(status: str | None) -> dict[str, str]:
    """How a run's status shows: an icon and a word, never colour alone. None: no run yet."""
    if status is None:
        return {"status": "none", "icon": "○", "label": "No runs yet"}
    icon, label = STATUS_LABELS.get(RunStatus(status), ("?", status))
    return {"status": status, "icon": icon, "label": label}


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


class Texts:
    """The texts one card shows, each shortened to SHORT_TEXT_CHARS with a note of its cut."""

    def __init__(self, run_id: int, seq: int) -> None:
        self.run_id, self.seq = run_id, seq
        self.cuts: list[dict[str, Any]] = []

    def shown(self, key: str, text: str) -> str:
        if len(text) <= SHORT_TEXT_CHARS:
            return text
        url = reverse("chat:event_text", args=[self.run_id, self.seq, key])
        self.cuts.append(
            {
                "what": EVENT_TEXTS[key],
                "shown": f"{SHORT_TEXT_CHARS:,}",
                "total": f"{len(text):,}",
                "url": url,
            }
        )
        return text[:SHORT_TEXT_CHARS]


def card_for(run_id: int, seq: int, kind: str, data: dict[str, Any]) -> Card | None:
    """The card for one event, or None for an event a person need not see."""
    texts = Texts(run_id, seq)
    card = event_card(run_id, seq, kind, data, texts)
    if card is not None and texts.cuts:
        card.data["cuts"] = texts.cuts
    return card


def event_card(run_id: int, seq: int, kind: str, data: dict[str, Any], texts: Texts) -> Card | None:
    match kind:
        case "memories_recalled":
            memories = data["memories"]
            best = max((memory["score"] for memory in memories), default=0)
            return Card("memories", f"ev-{run_id}-{seq}", {"memories": memories, "best": best})
        case "model_replied" if data["tool_calls"] and (data["text"] or data.get("reasoning")):
            # A reply without tool calls is the answer, which the run's end shows.
            return Card(
                "model",
                f"ev-{run_id}-{seq}",
                {
                    "html": markdown(texts.shown("text", data["text"])),
                    "reasoning": texts.shown("reasoning", data.get("reasoning", "")),
                },
            )
        case "tool_call_started" | "tool_call_finished":
            finished = kind == "tool_call_finished"
            return Card(
                "tool",
                f"call-{run_id}-{data['step']}-{data['call_id']}",
                tool_data(data, finished, texts),
                replaces=finished,
            )
        case "breaker_tripped":
            text = f"Circuit breaker: {data['tool']} — {reason_text(data['reason'])}."
            return Card("banner", f"ev-{run_id}-{seq}", {"text": text, "tone": "bad"})
        case "run_halted":
            detail = data["detail"][:1].upper() + data["detail"][1:]
            text = f"Halted: {reason_text(data['reason'])}. {detail}"
            return Card("banner", f"ev-{run_id}-{seq}", {"text": text, "tone": "warn"})
        case "run_resumed":
            # The person reading the chat owns the run: a continue is theirs.
            text = resumed_text(data["reason"], data.get("by", ""), who=OWNERS_WHO)
            return Card("marker", f"ev-{run_id}-{seq}", {"text": text})
        case "run_finished":
            status = data["status"]
            return Card(
                "answer",
                f"ev-{run_id}-{seq}",
                {
                    "html": markdown(texts.shown("answer", data["answer"])),
                    "error": data["error"],
                    "next_step": next_step(data),
                    **status_label(status),
                },
            )
    return None


def reason_text(reason: str) -> str:
    try:
        return HALT_REASONS[HaltReason(reason)]
    except ValueError:
        return reason.replace("_", " ")


def tool_data(data: dict[str, Any], finished: bool, texts: Texts) -> dict[str, Any]:
    code, arguments = shown_arguments(data["arguments"])
    shown: dict[str, Any] = {
        "tool": data["tool"],
        "code": texts.shown("arguments", code) if code else "",
        "arguments": texts.shown("arguments", arguments) if arguments else "",
    }
    if not finished:
        return shown | {"status": "running", "icon": "…", "label": "Running"}
    text = texts.shown("text", data["text"])
    ok = data["status"] == "ok"
    return shown | {
        "status": data["status"],
        "icon": "✓" if ok else "✗",
        "label": data["status"].capitalize(),
        "text": text,
        "long": text.count("\n") >= LONG_OUTPUT_LINES or len(text) > LONG_OUTPUT_CHARS,
        "milliseconds": round(data["duration"] * 1000),
        "policy": data.get("policy", ""),
        "truncated": data.get("truncated", False),
    }


def shown_arguments(raw: str) -> tuple[str, str]:
    """run_code's code on its own; any other arguments as indented JSON (or as sent, if bad)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return "", raw
    if isinstance(parsed, dict) and set(parsed) == {"code"} and isinstance(parsed["code"], str):
        return parsed["code"], ""
    return "", json.dumps(parsed, indent=2, ensure_ascii=False)


def page_cards(run_id: int, events: Iterable[tuple[int, str, dict[str, Any]]]) -> list[Card]:
    """A run's cards as the page shows them at first: each later card in its earlier's place.
    Drawn where they belong, none is an out-of-band swap: in a whole turn that htmx swaps in (a
    continued run's), such a card would be taken out of the turn to replace its old self."""
    cards: list[Card] = []
    at: dict[str, int] = {}
    for seq, kind, data in events:
        card = card_for(run_id, seq, kind, data)
        if card is None:
            continue
        card = replace(card, replaces=False)
        if card.id in at:
            cards[at[card.id]] = card
        else:
            at[card.id] = len(cards)
            cards.append(card)
    return cards


def render_card(card: Card) -> str:
    return render_to_string(card.template, {"card": card})
