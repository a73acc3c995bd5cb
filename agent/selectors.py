"""Reads of runs and conversations, as their owner may see them: another person's run or
conversation does not exist here."""

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from agent.events import (
    event_from_dict,
)
from agent.history import messages_from_events
from agent.llm.base import Message
from agent.llm.tokens import count_tokens
from agent.models import FINISHED, AgentRun, Conversation


def runs_for(user: AbstractBaseUser) -> QuerySet[AgentRun]:
    """The user's runs, less those of conversations they deleted."""
    return AgentRun.objects.filter(user=user).filter(
        Q(conversation__isnull=True) | Q(conversation__deleted_at__isnull=True)
    )


def conversations_for(user: AbstractBaseUser) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user, deleted_at__isnull=True)


def conversation_context(run: AgentRun) -> list[Message]:
    """The conversation's earlier turns (task, then final answer), newest last, within
    LOOP_CONVERSATION_TOKENS; older turns are left out, and a one-line note says how many."""
    if run.conversation_id is None:
        return []
    earlier = (
        AgentRun.objects.filter(conversation_id=run.conversation_id, pk__lt=run.pk)
        .filter(status__in=FINISHED)
        .exclude(answer="")
        .order_by("-pk")
        .values_list("task", "answer")
    )
    budget = settings.LOOP_CONVERSATION_TOKENS
    turns: list[Message] = []
    dropped = 0
    for task, answer in earlier:
        cost = count_tokens(task) + count_tokens(answer)
        if dropped or cost > budget:
            dropped += 1
            continue
        budget -= cost
        turns[:0] = [{"role": "user", "content": task}, {"role": "assistant", "content": answer}]
    if dropped:
        note = (
            f"[Loop] {dropped} earlier turn{'s' if dropped > 1 else ''} of this conversation "
            "left out to fit the context budget."
        )
        turns.insert(0, {"role": "system", "content": note})
    return turns


def history_of(run: AgentRun) -> list[Message]:
    """The message history as the model saw it, rebuilt from the run's event log alone."""
    events = run.events.order_by("seq").values_list("kind", "data")
    return messages_from_events(event_from_dict(kind, data) for kind, data in events)
