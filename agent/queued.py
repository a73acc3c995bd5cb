"""Tasks a person sends while a run is going in their conversation. Each waits its turn and
becomes the conversation's next run when the live one ends (agent.runs.start_next_queued), or,
sent "now", goes to the live run, whose model reads it before its next turn (the loop's inbox:
`messages_for`). A person sees and changes only their own."""

from collections.abc import Sequence

import psycopg
from django.contrib.auth.models import User
from django.db import DatabaseError, transaction
from django.db.models import Exists, OuterRef, QuerySet

from agent.connections import statement_session
from agent.models import LIVE, AgentRun, Conversation, QueuedTask
from agent.runs import InvalidTask, check_assistant_usable, clean_task, start_waiting
from agent.selectors import conversations_for
from core.run import PersonMessage

# Tasks one conversation may hold waiting: a queue, not a backlog.
MAX_WAITING = 10


class NotWaiting(InvalidTask):
    """The task no longer waits: it started, was sent to the run, or was removed."""


def live_run_in(conversation: Conversation) -> AgentRun | None:
    """The conversation's run going now (its latest, if several: a Continue of an older one)."""
    return (
        AgentRun.objects.filter(conversation=conversation, status__in=LIVE).order_by("-pk").first()
    )


def queue_task(user: User, conversation: Conversation, text: str, *, model: str = "") -> QueuedTask:
    """Keep `text` as the conversation's next task, after those already waiting, to run on
    `model` (a qualified name; "": the conversation's when it starts); it starts at once if no
    run is going any more (the one that was may have ended meanwhile)."""
    text = clean_task(text)
    with transaction.atomic():
        conversation = conversations_for(user).select_for_update().get(pk=conversation.pk)
        check_assistant_usable(user, conversation)
        if conversation.queued_tasks.count() >= MAX_WAITING:
            raise InvalidTask(
                f"{MAX_WAITING} tasks already wait in this conversation. Remove one, or wait "
                "for them to start."
            )
        task = QueuedTask.objects.create(conversation=conversation, text=text, model=model)
        start_waiting(conversation.pk)
    return task


def owned_waiting(user: User, task_id: int) -> QuerySet[QueuedTask]:
    mine = QueuedTask.objects.filter(conversation__in=conversations_for(user))
    return mine.filter(pk=task_id, sent_to__isnull=True)


def send_now(user: User, task_id: int) -> QueuedTask:
    """Hand a waiting task to the conversation's live run: its model reads it before its next
    turn. With no run going, the conversation's queue just moves on."""
    with transaction.atomic():
        task = owned_waiting(user, task_id).select_for_update().first()
        if task is None:
            raise NotWaiting("That task no longer waits: it has started or was removed.")
        live = live_run_in(task.conversation)
        if live is None:
            start_waiting(task.conversation_id)
        else:
            task.sent_to = live
            task.save(update_fields=["sent_to"])
    return task


def remove(user: User, task_id: int) -> None:
    """Take back a task that waits; one sent to the run may have been read: it stays."""
    if not owned_waiting(user, task_id).delete()[0]:
        raise NotWaiting("That task no longer waits: it has started or was sent to the run.")


def waiting_in(conversation: Conversation) -> list[QueuedTask]:
    return list(conversation.queued_tasks.order_by("pk"))


# The table name is the model's own, never input.
INBOX = f"SELECT id, text FROM {QueuedTask._meta.db_table} WHERE sent_to_id = %s ORDER BY id"  # noqa: S608


def messages_for(run_id: int) -> Sequence[PersonMessage]:
    """The run's inbox: the tasks its person sent it now, in order. Read on a session borrowed
    for this statement alone (agent.connections): the run's thread goes on to its model call
    holding none. A database that does not answer gives nothing this turn; the next asks again."""
    try:
        with statement_session() as session:
            rows = session.execute(INBOX, [run_id]).fetchall()
    except (DatabaseError, psycopg.Error):
        return ()
    return [PersonMessage(pk, text) for pk, text in rows]


def conversations_waiting() -> list[int]:
    """The conversations where a task waits and no run goes (the recovery starts them)."""
    live = AgentRun.objects.filter(status__in=LIVE, conversation_id=OuterRef("conversation_id"))
    waiting = QueuedTask.objects.filter(sent_to__isnull=True).exclude(Exists(live))
    return sorted(set(waiting.values_list("conversation_id", flat=True)))
