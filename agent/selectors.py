"""Reads of runs and conversations, as their owner may see them: another person's run or
conversation does not exist here. The chat's pages and socket read through these, and a run's
log comes out as typed events (`Logged`), converted once where it is read."""

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import OuterRef, Q, QuerySet, Subquery

from agent.llm.factory import (
    ModelChoice,
    default_model,
    offered_models,
    parse,
    resolve,
)
from agent.llm.tokens import count_tokens
from agent.models import FINISHED, AgentRun, Conversation, PersonalInstructions, RunEvent
from assistants.models import AssistantVersion
from core.events import Event, MemoriesRecalled, Unreadable, event_from_dict, loaded
from core.history import loop_note
from core.instructions import Instructions
from core.llm import Message
from core.recalled import RecalledMemory
from core.state import messages_from_events
from memory.forgetting import remembered_by
from memory.models import Memory


def runs_for(user: User) -> QuerySet[AgentRun]:
    """The user's runs, less those of conversations they deleted."""
    return AgentRun.objects.filter(user=user).filter(
        Q(conversation__isnull=True) | Q(conversation__deleted_at__isnull=True)
    )


def conversations_for(user: User) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user, deleted_at__isnull=True)


def run_of(user: User, run_id: int) -> AgentRun | None:
    """The user's run of that id, or None (another person's, or of a deleted conversation)."""
    return runs_for(user).filter(pk=run_id).first()


def run_of_with_state(user: User, run_id: int) -> AgentRun | None:
    """As run_of, in the same one query: the run's feedback (`getattr(run, "feedback", None)`)
    and its conversation with `last_status` (as with_last_status), for a page that redraws the
    run's status, its feedback and the sidebar's icon together."""
    last = AgentRun.objects.filter(conversation=OuterRef("conversation_id")).order_by("-pk")
    run = (
        runs_for(user)
        .filter(pk=run_id)
        .select_related("conversation", "feedback")
        .annotate(
            conversation_last_status=Subquery(last.values("status")[:1]),
            conversation_last_cause=Subquery(last.values("cause")[:1]),
        )
        .first()
    )
    if run is not None and run.conversation is not None:
        # As with_last_status annotates a conversation: attributes the model does not declare.
        run.conversation.last_status = run.conversation_last_status  # type: ignore[attr-defined]
        run.conversation.last_cause = run.conversation_last_cause  # type: ignore[attr-defined]
    return run


def runs_by_id(user: User, ids: Iterable[int | None]) -> dict[int, AgentRun]:
    """The user's runs of these ids, by id, each with its conversation: the runs that stored
    their memories. A run of a deleted conversation is still theirs here (its memory outlived
    it); a reader links to the conversation only while `conversation.deleted_at` is None."""
    wanted = {run_id for run_id in ids if run_id is not None}
    runs = AgentRun.objects.filter(user=user, pk__in=wanted).select_related("conversation")
    return {run.pk: run for run in runs} if wanted else {}


def recalled_in(run: AgentRun) -> list[RecalledMemory]:
    """The memories the run recalled, from its MemoriesRecalled events (a run continued may
    recall again), each once, in the order they came: none if it recalled nothing, or if this
    version cannot read the event."""
    recalled: dict[int, RecalledMemory] = {}
    for row in run.events.filter(kind=MemoriesRecalled.kind).order_by("seq"):
        match row.event:
            case MemoriesRecalled(memories=memories):
                for memory in memories:
                    recalled.setdefault(memory.id, memory)
    return list(recalled.values())


class Branching(NamedTuple):
    """Where a turn stands among its versions (its siblings: regenerated or edited turns):
    which one of how many it is, and the versions before and after it."""

    # The names the page reads (turn.branching.index); they shadow tuple's methods, never called.
    index: int  # type: ignore[assignment]
    count: int  # type: ignore[assignment]
    previous: int | None
    next: int | None


class Turn(NamedTuple):
    id: int
    parent: int | None
    chosen_at: datetime | None


class ConversationPath(NamedTuple):
    """The turns shown, oldest first: from its first turn on, the version chosen last of each."""

    runs: list[AgentRun]
    branching: dict[int, Branching]


def turns_of(conversation_id: int) -> list[Turn]:
    """Every turn of the conversation, of every branch, oldest first."""
    rows = AgentRun.objects.filter(conversation_id=conversation_id).order_by("pk")
    return [Turn(*row) for row in rows.values_list("pk", "parent_id", "chosen_at")]


def chosen_path(turns: list[Turn]) -> list[tuple[int, Branching]]:
    """From the first turn on, the version of each turn chosen last, with its branching."""
    versions: dict[int | None, list[Turn]] = {}
    for turn in turns:
        versions.setdefault(turn.parent, []).append(turn)
    path: list[tuple[int, Branching]] = []
    parent: int | None = None
    while siblings := versions.get(parent):
        chosen = max(
            siblings, key=lambda turn: (turn.chosen_at or datetime.min.replace(tzinfo=UTC), turn.id)
        )
        path.append((chosen.id, branching_among([turn.id for turn in siblings], chosen.id)))
        parent = chosen.id
    return path


def runs_of(conversation: Conversation) -> ConversationPath:
    """The conversation's turns as shown: its chosen branch, oldest first."""
    path = chosen_path(turns_of(conversation.pk))
    by_id = AgentRun.objects.select_related("feedback").in_bulk([pk for pk, _ in path])
    return ConversationPath([by_id[pk] for pk, _ in path], dict(path))


def branching_of(run: AgentRun) -> Branching:
    """Where the run stands among the versions of its turn."""
    # A run of no conversation: Django reads `= None` as IS NULL; django-stubs allows no None.
    siblings = AgentRun.objects.filter(conversation_id=run.conversation_id, parent_id=run.parent_id)  # type: ignore[misc]
    return branching_among(list(siblings.order_by("pk").values_list("pk", flat=True)), run.pk)


def branching_among(versions: list[int], shown: int) -> Branching:
    """Where version `shown` stands among `versions` of its turn, oldest first."""
    index = versions.index(shown) if shown in versions else 0
    before = versions[index - 1] if index else None
    after = versions[index + 1] if index + 1 < len(versions) else None
    return Branching(index + 1, max(len(versions), 1), before, after)


def last_turn_id(conversation_id: int) -> int | None:
    """The last turn of the chosen branch: what a new task in the conversation follows."""
    path = chosen_path(turns_of(conversation_id))
    return path[-1][0] if path else None


def new_conversation_model(offered: list[ModelChoice]) -> ModelChoice:
    """The model a new conversation starts on: the first offered (the default, when it can run
    here). ModelUnavailable, saying why, when none can run, not even the default."""
    return offered[0] if offered else resolve(default_model())


def conversation_model(
    conversation: Conversation | None, offered: list[ModelChoice] | None = None
) -> ModelChoice:
    """The model the next task in `conversation` runs on (None: a new conversation): the one it
    goes on with while it is still offered here, else the model a new conversation starts on.
    `offered` is offered_models(), given when the caller has it already (one request computes
    it once)."""
    offered = offered_models() if offered is None else offered
    if conversation is not None and conversation.model:
        stored = parse(conversation.model)
        if stored in offered:
            return stored
    return new_conversation_model(offered)


def model_offered(run: AgentRun, offered: list[ModelChoice] | None = None) -> bool:
    """Whether the model the run recorded is still one a person may pick here: only then may its
    owner continue it (agent.runs.check_still_offered, and the Continue button). `offered` as for
    conversation_model."""
    offered = offered_models() if offered is None else offered
    return ModelChoice(run.provider, run.model) in offered


def remembered_in(user: User, conversation: Conversation) -> QuerySet[Memory]:
    """What the conversation's runs stored in their owner's memory (what deleting it may forget)."""
    return remembered_by(user, conversation.runs.values("pk"))


def with_last_status(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """Each conversation with `last_status`, the status of its latest run (None: no run yet),
    and `last_cause`, why it ended so (a success that did nothing of its task is not done)."""
    last = AgentRun.objects.filter(conversation=OuterRef("pk")).order_by("-pk")
    return conversations.annotate(
        last_status=Subquery(last.values("status")[:1]),
        last_cause=Subquery(last.values("cause")[:1]),
    )


def conversations_with_status(user: User) -> QuerySet[Conversation]:
    """The user's conversations, most recently updated first, each with its `last_status`."""
    return with_last_status(conversations_for(user))


def conversation_with_status(conversation_id: int) -> Conversation:
    """One conversation with its `last_status`, for a run already known to be the reader's (a
    conversation deleted since still has its row: a soft delete)."""
    return with_last_status(Conversation.objects.filter(pk=conversation_id)).get()


class Logged(NamedTuple):
    """One event of a run's log, as every reader takes it: its number and its typed event."""

    seq: int
    event: Event | Unreadable


def events_of(run: AgentRun, *, after: int = 0, limit: int | None = None) -> list[Logged]:
    """The run's events after seq `after`, in order (at most `limit` of them)."""
    rows = run.events.filter(seq__gt=after).order_by("seq").values_list("seq", "kind", "data")
    if limit is not None:
        rows = rows[:limit]
    return [Logged(seq, loaded(kind, data)) for seq, kind, data in rows]


def events_of_run_of(
    user: User, run_id: int, *, after: int = 0, limit: int | None = None
) -> list[Logged]:
    """The events after seq `after` of the user's run of that id, in order (at most `limit`),
    in one query that also checks the run is theirs: none if it is not (another person's, of a
    deleted conversation), as if it had no events."""
    theirs = runs_for(user).filter(pk=run_id).values("pk")
    rows = (
        RunEvent.objects.filter(run__in=theirs, seq__gt=after)
        .order_by("seq")
        .values_list("seq", "kind", "data")
    )
    if limit is not None:
        rows = rows[:limit]
    return [Logged(seq, loaded(kind, data)) for seq, kind, data in rows]


def event_at(run: AgentRun, seq: int) -> Event | Unreadable | None:
    """The run's event number `seq`, or None if it has none of that number."""
    row = run.events.filter(seq=seq).values_list("kind", "data").first()
    return None if row is None else loaded(*row)


def conversation_context(run: AgentRun) -> list[Message]:
    """The conversation's earlier turns (task, then final answer), newest last, after the
    messages a program gave with the branch's first task (its prelude), within
    LOOP_CONVERSATION_TOKENS; the oldest are left out first, and a one-line note says how many."""
    if run.conversation_id is None:
        return []
    branch = ancestors(run)
    earlier = [(task, answer) for task, answer in branch.turns if answer]
    budget = settings.LOOP_CONVERSATION_TOKENS
    kept: list[Message] = []
    dropped_turns = dropped_messages = 0
    for task, answer in earlier:
        cost = count_tokens(task) + count_tokens(answer)
        if dropped_turns or cost > budget:
            dropped_turns += 1
            continue
        budget -= cost
        kept[:0] = [{"role": "user", "content": task}, {"role": "assistant", "content": answer}]
    for message in reversed(branch.prelude):
        cost = count_tokens(message["content"])
        if dropped_turns or dropped_messages or cost > budget:
            dropped_messages += 1
            continue
        budget -= cost
        kept.insert(0, message)
    if dropped_turns or dropped_messages:
        kept.insert(0, {"role": "system", "content": left_out(dropped_turns, dropped_messages)})
    return kept


def left_out(turns: int, messages: int) -> str:
    """Loop's note to the model on what of the conversation it does not see."""
    parts = []
    if turns:
        parts.append(f"{turns} earlier turn{'s' if turns > 1 else ''} of this conversation")
    if messages:
        parts.append(
            f"{messages} earlier message{'s' if messages > 1 else ''} given with its first task"
        )
    return loop_note(f"{' and '.join(parts)} left out to fit the context budget.")


def instructions_for(run: AgentRun) -> Instructions:
    """What the run's person asked of every run, and of the run's conversation, as they stand
    when it starts (an edit applies from the next run on)."""
    person = PersonalInstructions.objects.filter(user_id=run.user_id).values_list("text", flat=True)
    # A run of no conversation: Django reads `= None` as IS NULL; django-stubs allows no None.
    conversation = Conversation.objects.filter(pk=run.conversation_id).values_list(  # type: ignore[misc]
        "instructions", flat=True
    )
    return Instructions(
        person=person.first() or "",
        conversation=conversation.first() or "",
        assistant=assistant_instructions(run),
    )


def assistant_instructions(run: AgentRun) -> str:
    """The instructions of the assistant version the run was started with ("" for none): the
    version's, so an edit of the assistant since changes nothing of this run."""
    if run.assistant_version_id is None:
        return ""
    snapshot = AssistantVersion.objects.filter(pk=run.assistant_version_id).values_list(
        "snapshot", flat=True
    )
    return str((snapshot.first() or {}).get("instructions", ""))


class Branch(NamedTuple):
    """What a run follows in its conversation: the turns before it, newest first, as (task,
    answer) (the answer of one that did not finish is "": it is no context), and the messages
    given with the branch's first task (AgentRun.prelude), oldest first."""

    turns: list[tuple[str, str]]
    prelude: list[Message]


def ancestors(run: AgentRun) -> Branch:
    """The turns the run follows in its branch, and the prelude of the branch's first turn."""
    # A run of no conversation: Django reads `= None` as IS NULL; django-stubs allows no None.
    rows = AgentRun.objects.filter(conversation_id=run.conversation_id, pk__lt=run.pk)  # type: ignore[misc]
    turns = {
        pk: (parent, task, answer if status in FINISHED else "", prelude)
        for pk, parent, status, task, answer, prelude in rows.values_list(
            "pk", "parent_id", "status", "task", "answer", "prelude"
        )
    }
    chain: list[tuple[str, str]] = []
    first = run.prelude
    at = run.parent_id
    while at in turns:
        at, task, answer, first = turns.pop(at)  # popped: no loop, whatever the rows say
        chain.append((task, answer))
    return Branch(chain, prelude_messages(first))


def prelude_messages(stored: object) -> list[Message]:
    """The stored prelude's user and assistant messages of text (anything else it might hold is
    no message for the model)."""
    if not isinstance(stored, list):
        return []
    return [
        {"role": message["role"], "content": message["content"]}
        for message in stored
        if isinstance(message, dict)
        and message.get("role") in ("user", "assistant")
        and isinstance(message.get("content"), str)
        and message["content"]
    ]


def history_of(run: AgentRun) -> list[Message]:
    """The message history as the model saw it, rebuilt from the run's event log alone."""
    events = run.events.order_by("seq").values_list("kind", "data")
    return messages_from_events(event_from_dict(kind, data) for kind, data in events)
