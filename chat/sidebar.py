"""The sidebar's conversations: found by a word of their title or of any task sent in them, and
grouped by when they were last used (today, yesterday, the last 7 days, older), as a person
looks for "the one from this morning" or "the one where I asked about Lisbon"."""

from dataclasses import dataclass, field
from datetime import date, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from agent import selectors
from agent.models import AgentRun, Conversation
from chat.rendering import labelled

# Longer than any title: a query past it can match nothing more precise.
MAX_QUERY = 200


@dataclass
class Group:
    """Conversations last used in one span of days, newest first."""

    label: str
    conversations: list[Conversation] = field(default_factory=list)


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


def groups_for(user: AbstractBaseUser, query: str = "") -> list[Group]:
    """The person's conversations for the sidebar, those matching `query` if one is given, in
    groups by the day they were last used (in the site's time zone). Empty groups are left out."""
    conversations = selectors.conversations_with_status(user)
    query = query.strip()[:MAX_QUERY]
    if query:
        conversations = matching(conversations, query)
    today = timezone.localdate()
    groups: dict[str, Group] = {}
    for conversation in conversations:
        label = span_of(timezone.localdate(conversation.updated_at), today)
        groups.setdefault(label, Group(label)).conversations.append(labelled(conversation))
    return list(groups.values())
