"""The copy a shared link shows, made once at share time: the conversation's title and its shown
branch's turns, each with the cards the chat draws of it (chat/rendering.py), reduced to what a
reader other than its owner may see, as plain JSON. The page draws this copy alone, with the
chat's own card partials, so nothing added, edited, deleted or pruned later changes it.

Left out of the copy: the memories a run recalled (the sharer's), calls still waiting for the
sharer's decision (their forms), and every link into the sharer's own pages (the whole of a
shortened text, a file in their Files panel, a tool's review, a reconnect): a card that was
shortened says so instead.
"""

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from agent import selectors
from agent.models import AgentRun, Conversation
from chat.rendering import Card, page_cards, pruned_cards, status_label
from chat.texts import SHORT_TEXT_CHARS
from core.events import RunResumed
from core.wording import CONSOLE_WHO, resumed_text
from workspace.markup import sanitised

VERSION = 1
# The chat's cards a shared page draws; the others (recalled memories, a call waiting for its
# person's decision) are the sharer's alone.
SHOWN_CARDS = frozenset({"model", "tool", "said", "marker", "pruned", "answer"})
# What a card's data holds that leads into the sharer's own pages, or is drawn for them alone.
PRIVATE_DATA = frozenset({"cuts", "file", "images", "hold", "reconnect", "mcp", "url", "held"})
# The cards whose `html` is model output drawn as Markdown: sanitised again as they are drawn.
HTML_CARDS = frozenset({"model", "answer"})


class TooLarge(Exception):
    """The copy would be larger than LOOP_SHARE_SNAPSHOT_MAX_BYTES: the message says by how much
    and what to do."""


@dataclass(frozen=True)
class SharedCard:
    """A card of the copy as the page draws it: the chat's partial, or sharing's own where the
    chat's speaks to the owner ("You, while it worked")."""

    partial: str
    id: str
    data: dict[str, Any]

    @property
    def template(self) -> str:
        if self.partial == "said":
            return "sharing/cards.html#said"
        return f"chat/cards.html#{self.partial}"


def snapshot_of(conversation: Conversation) -> dict[str, Any]:
    """The copy of `conversation` as it stands now; TooLarge past the site's bound."""
    path = selectors.runs_of(conversation)
    copy = {
        "version": VERSION,
        "title": conversation.title,
        "taken_at": timezone.now().isoformat(),
        "turns": [turn_copy(run) for run in path.runs],
    }
    size = len(json.dumps(copy, ensure_ascii=False).encode())
    bound = settings.LOOP_SHARE_SNAPSHOT_MAX_BYTES
    if size > bound:
        raise TooLarge(
            f"This conversation is too long to share: its copy would take {size:,} bytes, over "
            f"this site's limit of {bound:,}. Share a shorter conversation (start a new one for "
            "the part to share), or ask this site's operators to raise "
            "LOOP_SHARE_SNAPSHOT_MAX_BYTES."
        )
    return copy


def turn_copy(run: AgentRun) -> dict[str, Any]:
    """One turn: its task, model, status and its cards as the chat draws them now, for no one
    in particular (no person's pending decisions or tool reviews)."""
    events = [] if run.log_pruned else selectors.events_of(run)
    cards = pruned_cards(run) if run.log_pruned else page_cards(run.pk, events)
    # A marker says who continued the run as its owner reads it ("you"): here, as others do.
    markers = {
        f"ev-{run.pk}-{seq}": resumed_text(event.reason, event.by, who=CONSOLE_WHO)
        for seq, event in events
        if isinstance(event, RunResumed)
    }
    return {
        "task": run.task[:SHORT_TEXT_CHARS],
        "task_cut": len(run.task) > SHORT_TEXT_CHARS,
        "model": run.model,
        "status": status_label(run.status),
        "cards": [card_copy(card, markers) for card in cards if card.partial in SHOWN_CARDS],
    }


def card_copy(card: Card, markers: dict[str, str]) -> dict[str, Any]:
    data = {key: value for key, value in card.data.items() if key not in PRIVATE_DATA}
    if card.partial == "marker" and card.id in markers:
        data["text"] = markers[card.id]
    cuts = card.data.get("cuts") or []
    data["shortened"] = [{"what": cut["what"], "total": cut["total"]} for cut in cuts]
    # The data's values are str, numbers, booleans, lists and dicts of them (a StrEnum is a str).
    plain = json.loads(json.dumps(data, ensure_ascii=False, default=str))
    return {"partial": card.partial, "id": card.id, "data": plain}


def shown_turns(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """The copy's turns as the page draws them, model output sanitised again on the way (the
    copy is data in the database; the page trusts no HTML it did not just clean)."""
    return [
        {**turn, "cards": [shown_card(card) for card in turn["cards"]]}
        for turn in snapshot["turns"]
    ]


def shown_card(card: dict[str, Any]) -> SharedCard:
    data = dict(card["data"])
    if card["partial"] in HTML_CARDS and isinstance(data.get("html"), str):
        data["html"] = sanitised(data["html"])
    return SharedCard(card["partial"], card["id"], data)
