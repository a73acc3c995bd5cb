"""The sidebar's conversations: found by a word of their title or of any task sent in them, and
grouped by when they were last used (today, yesterday, the last 7 days, older), as a person
looks for "the one from this morning" or "the one where I asked about Lisbon". Pinned ones come
first, in a group of their own; archived ones leave the list for the Archived view.

The list is read a page at a time, newest first by (updated_at, id), so the chat page costs the
same whether a person has ten conversations or ten thousand: "More" asks for the page after the
last one shown (a keyset, not an offset, which would read every row it skips)."""

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from agent import selectors
from agent.models import AgentRun, Conversation
from chat.rendering import labelled

# Longer than any title: a query past it can match nothing more precise.
MAX_QUERY = 200
# Conversations a page of the list shows (pinned ones aside, at most as many again).
PAGE_SIZE = 50
PINNED = "Pinned"
# Every group in the order the list shows them; a group's number is its place here, so that
# its heading's id is the same on every page of the list.
LABELS = (PINNED, "Today", "Yesterday", "Last 7 days", "Older")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Group:
    """Conversations last used in one span of days, newest first (or the pinned ones).
    `continued`: the group went on from the page before, whose heading names it."""

    label: str
    conversations: list[Conversation] = field(default_factory=list)
    continued: bool = False

    @property
    def number(self) -> int:
        return LABELS.index(self.label)


@dataclass(frozen=True)
class Cursor:
    """Where a page of the list ends: the last conversation's last use and id. Written as
    "<microseconds since 1970>-<id>", exact (an ISO time in a URL would need escaping)."""

    updated_at: datetime
    pk: int

    def __str__(self) -> str:
        return f"{(self.updated_at - EPOCH) // timedelta(microseconds=1)}-{self.pk}"

    @classmethod
    def parse(cls, text: str) -> "Cursor | None":
        """The cursor written so, or None for anything else (the list's first page)."""
        micros, _, pk = text.partition("-")
        if not (micros.isascii() and micros.isdecimal() and pk.isascii() and pk.isdecimal()):
            return None
        try:
            return cls(EPOCH + timedelta(microseconds=int(micros)), int(pk))
        except OverflowError:
            return None


@dataclass
class Sidebar:
    """One page of the list: its groups, and the query string that asks for the next page
    ("" on the last one)."""

    groups: list[Group]
    more: str = ""


def span_of(day: date, today: date) -> str:
    """The group a conversation last used on `day` belongs to."""
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    if day > today - timedelta(days=7):
        return "Last 7 days"
    return "Older"


def matching(conversations: QuerySet[Conversation], query: str) -> QuerySet[Conversation]:
    """The conversations whose title, or one of whose tasks, holds the query (any case)."""
    sent = AgentRun.objects.filter(conversation=OuterRef("pk"), task__icontains=query)
    return conversations.filter(Q(title__icontains=query) | Exists(sent))


def listed(user: User, query: str, *, archived: bool) -> QuerySet[Conversation]:
    """The person's conversations the list shows: the archived ones or the others, those
    matching `query` if one is given."""
    conversations = selectors.conversations_with_status(user).filter(
        archived_at__isnull=not archived
    )
    return matching(conversations, query) if query else conversations


def after(conversations: QuerySet[Conversation], cursor: Cursor | None) -> QuerySet[Conversation]:
    """The conversations past `cursor`, newest first, ties broken by id as the index orders."""
    conversations = conversations.order_by("-updated_at", "-pk")
    if cursor is None:
        return conversations
    older = Q(updated_at__lt=cursor.updated_at)
    return conversations.filter(older | Q(updated_at=cursor.updated_at, pk__lt=cursor.pk))


def sidebar_for(
    user: User,
    query: str = "",
    *,
    archived: bool = False,
    cursor: Cursor | None = None,
    continues: str = "",
    current: int | None = None,
) -> Sidebar:
    """A page of the person's list: on the first page (no `cursor`) of the list itself, its
    pinned conversations first; then up to PAGE_SIZE others by last use, in groups by day (the
    site's time zone). `continues` is the group the page before ended in: its heading is not
    drawn again. Empty groups are left out. Two queries, whatever the number of conversations."""
    query = query.strip()[:MAX_QUERY]
    conversations = listed(user, query, archived=archived)
    groups: list[Group] = []
    if not archived:
        if cursor is None:
            pinned = conversations.filter(pinned_at__isnull=False).order_by("-pinned_at", "-pk")
            if shown := [labelled(c) for c in pinned[:PAGE_SIZE]]:
                groups.append(Group(PINNED, shown))
        conversations = conversations.filter(pinned_at__isnull=True)
    page = list(after(conversations, cursor)[: PAGE_SIZE + 1])
    groups += by_day(page[:PAGE_SIZE], continues)
    if len(page) <= PAGE_SIZE:
        return Sidebar(groups)
    last = page[PAGE_SIZE - 1]
    asked = {"after": str(Cursor(last.updated_at, last.pk)), "continues": groups[-1].label}
    if query:
        asked["q"] = query
    if archived:
        asked["archived"] = "1"
    if current is not None:
        asked["current"] = str(current)
    return Sidebar(groups, urlencode(asked))


def by_day(conversations: list[Conversation], continues: str) -> list[Group]:
    """The conversations in groups by the day they were last used, newest first."""
    today = timezone.localdate()
    groups: dict[str, Group] = {}
    for conversation in conversations:
        label = span_of(timezone.localdate(conversation.updated_at), today)
        group = groups.setdefault(label, Group(label, continued=label == continues))
        group.conversations.append(labelled(conversation))
    return list(groups.values())


def groups_for(user: User, query: str = "") -> list[Group]:
    """The first page's groups of the person's list (those matching `query`)."""
    return sidebar_for(user, query).groups
