"""A run's records: the run itself, its append-only event log, its tool executions and breaker
trips, its resumes, and the conversation (a thread of runs) it belongs to."""

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import Any

import psycopg
from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import connections, models
from django.utils import timezone

from agent.connections import statement_session
from core.events import (
    BREAKER_REASONS,
    EVENT_TYPES,
    ContinuedBy,
    EndCause,
    Event,
    HaltReason,
    ResumeReason,
    RunStatus,
    Unreadable,
    loaded,
)
from core.instructions import INSTRUCTIONS_CHARS
from core.llm import CALL_ID_CHARS, TOOL_NAME_CHARS
from core.results import ToolStatus

# A run not ended: waiting for a worker, worked, or waiting for its person's decision.
LIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)

FINISHED = (
    RunStatus.SUCCEEDED,
    RunStatus.HALTED,
    RunStatus.CANCELLED,
    RunStatus.FAILED,
    RunStatus.INTERRUPTED,
)


def choices(values: list[str] | type[StrEnum]) -> list[tuple[str, str]]:
    return [(str(value), str(value).replace("_", " ").capitalize()) for value in values]


class Conversation(models.Model):
    """A thread of runs: each run's context holds the thread's earlier tasks and answers.

    Deleting one is soft (`deleted_at`): it and its runs vanish for its owner, while the runs, their
    event logs and audit rows stay for operators. Each run records the provider and model it used;
    `model` is what the conversation goes on with.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    # The qualified name (factory.ModelChoice.name) of the model its next task runs on: the one
    # its latest run was started with. "" before its first run.
    model = models.CharField(max_length=200, blank=True, default="")
    # What its owner asked of its runs, in their system prompt (core.instructions).
    instructions = models.CharField(max_length=INSTRUCTIONS_CHARS, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Set by its owner from the sidebar: a pinned one stays at the top, an archived one leaves
    # the list for the Archived view. Neither moves `updated_at` (the list's order is by use).
    pinned_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    # The assistant it was started with (assistants/): its runs each record the version they used.
    assistant = models.ForeignKey(
        "assistants.Assistant",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="conversations",
    )

    class Meta:
        ordering = ("-updated_at",)
        # The sidebar reads a page at a time by (updated_at, id), newest first (chat/sidebar.py):
        # the id breaks ties, so a page ends where the next begins.
        indexes = (
            models.Index(fields=["owner", "-updated_at", "-id"], name="conversation_by_use"),
        )

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


class PersonalInstructions(models.Model):
    """A person's "how to answer me": in the system prompt of every run they start, marked as
    their preferences (core.instructions). It goes with the account."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="personal_instructions",
    )
    text = models.CharField(max_length=INSTRUCTIONS_CHARS, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "personal instructions"

    def __str__(self) -> str:
        return f"Instructions of user {self.user_id}"


def run_search_vector() -> SearchVector:
    """The words of a run's task, answer and error, as the console's search matches them
    (console/runs.py). The index below is on this very expression, so a query must use it too.
    'simple': words as written, lowercased, no stemming and no stop words, whatever the language."""
    return SearchVector("task", "answer", "error", config="simple")


class AgentRun(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs"
    )
    # Runs from the terminal belong to no conversation.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    task = models.TextField()
    # The turn before it in its branch of the conversation (None: its first turn). A regenerated
    # or edited turn is a sibling: the same parent. Of siblings, the one chosen last
    # (`chosen_at`) is shown, and its branch is what the conversation goes on from.
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children"
    )
    chosen_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=24, choices=choices(RunStatus), default=RunStatus.QUEUED)
    halt_reason = models.CharField(max_length=32, choices=choices(HaltReason), blank=True)
    answer = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # Why it ended so, when its status alone does not say ("": it does): what a person may do
    # about the run is read from this, never from the wording of `error`.
    cause = models.CharField(max_length=32, choices=choices(EndCause), blank=True, default="")
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=128)
    limits = models.JSONField(default=dict)
    iterations = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # The engine's side (engine/tasks.py). `attempt` grows by one each time a worker takes the run:
    # the recorder's writes carry it, so a worker that lost the run can no longer write to it.
    attempt = models.PositiveIntegerField(default=0)
    job_id = models.BigIntegerField(null=True, blank=True)  # the Procrastinate job working it
    worker = models.CharField(max_length=200, blank=True)  # who works it now; "" once handed back
    resumes = models.PositiveIntegerField(default=0)  # times a live worker took it from a lost one
    # A process working it without a job (`runagent`) writes this every LOOP_STALE_SECONDS / 3;
    # a worker's runs have their worker's heartbeat instead (agent/abandoned.py).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Who asked it to go on, until a worker picks the continue up (then the RunResume row says).
    continue_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # When the retention (agent/retention.py) deleted its event log and cleared its tool outputs;
    # the row and its figures stay. A run whose log is gone cannot go on from it.
    log_pruned_at = models.DateTimeField(null=True, blank=True)
    # The API key that started the run, as it was then (its prefix, name and scopes; api/); None
    # for a run started in the chat, by runagent or by Loop itself.
    api_key = models.JSONField(null=True, blank=True)
    # The messages a program gave before the task of a conversation's first turn, oldest first, as
    # [{"role": "user" | "assistant", "content": str}] (the OpenAI-compatible endpoint, api/): the
    # branch's later turns see them too, before its own turns (selectors.conversation_context).
    prelude = models.JSONField(default=list, blank=True)
    # What it was allowed when it started (agent/allowed.py): {"rights": the person's rights under
    # its assistant's choices (rights.effective.Rights.record()), "assistant": {"id", "version",
    # "name"} or None}. The worker narrows it by the person's rights as they stand at each attempt.
    allowed = models.JSONField(default=dict, blank=True)
    # The version of the assistant it was started with (None: none, or the assistant is gone; the
    # `allowed` record keeps its name and version number).
    assistant_version = models.ForeignKey(
        "assistants.AssistantVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
    )

    class Meta:
        ordering = ("-created_at",)
        indexes = (
            models.Index(fields=["user", "-created_at"]),
            models.Index(fields=["status"]),
            # The usage page reads the runs of the days it shows (console/selectors.py).
            models.Index(fields=["created_at"], name="agent_run_created_idx"),
            # The retention's next runs to prune, oldest end first: only runs not pruned yet.
            models.Index(
                fields=["finished_at"],
                condition=models.Q(log_pruned_at__isnull=True),
                name="agent_run_unpruned_end_idx",
            ),
            # The console's run search (console/runs.py), on PostgreSQL's own full-text search.
            GinIndex(run_search_vector(), name="agent_run_search_idx"),
        )

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status}): {self.task[:60]}"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def owner_active(self) -> bool:
        """Whether the account it acts for may use Loop: not a deleted account's placeholder,
        not deactivated (agent.runs.check_owner_active)."""
        return self.user.is_active

    @property
    def log_pruned(self) -> bool:
        return self.log_pruned_at is not None

    @property
    def can_continue(self) -> bool:
        """Halted by a limit, stopped (a Stop is not a verdict on the run: the person may change
        their mind), interrupted, or failed because the model did not answer: the person may ask
        it to go on from where it stopped, while its log (where it stopped) is kept."""
        if self.log_pruned:
            return False
        if self.status in (RunStatus.HALTED, RunStatus.CANCELLED, RunStatus.INTERRUPTED):
            return True
        return self.status == RunStatus.FAILED and self.cause == EndCause.MODEL_DOWN


class RunEventManager(models.Manager["RunEvent"]):
    def append(
        self,
        run_id: int,
        seq: int,
        kind: str,
        step: int,
        data: dict[str, Any],
        announced: Callable[[str], str] | None = None,
        *,
        attempt: int | None = None,
    ) -> bool:
        """Append one event (see `append_all`)."""
        return self.append_all(run_id, [(seq, kind, step, data)], announced, attempt=attempt)

    def append_all(
        self,
        run_id: int,
        rows: Sequence[tuple[int, str, int, dict[str, Any]]],
        announced: Callable[[str], str] | None = None,
        *,
        attempt: int | None = None,
        alongside: Sequence["Alongside"] = (),
    ) -> bool:
        """Append events, each `(seq, kind, step, data)`, and insert the `alongside` records (a
        tool call's audit row, say), all in one statement, so in one round trip and atomically;
        False if `attempt` is given and the run is no longer at that attempt (another worker
        took it over), in which case nothing is written.

        Every step of every run appends its events here, so this is the hot path: the statement
        is made once for each shape (`appending`), and only its parameters each time, each
        value as psycopg sends it without a Django field's preparing (the statement casts each
        to its column's type), each JSON encoded once, to text. With `announced` (the event
        transport's event_insert, agent.bus), the statement, which returns each event's run_id
        and seq, also announces them: a NOTIFY is delivered only when the rows are committed,
        so whoever hears it can read them.
        """
        shape = tuple(record.model for record in alongside)
        statement = appending(self.db, len(rows), attempt is not None, announced, shape)
        now = timezone.now()
        params = [
            value
            for seq, kind, step, payload in rows
            for value in (run_id, seq, kind, step, json.dumps(payload), now)
        ]
        if attempt is not None:
            params += [run_id, attempt]
        for record in alongside:
            params += record.inserted(now)
        return prepared_execute(connections[self.db], statement, params) == len(rows)


@dataclass(frozen=True)
class Alongside:
    """A row inserted with a run's events, in their statement (a tool call's audit row, a
    breaker trip): its model and its fields' values by attribute name (`run_id`); a field left
    out takes its default, an `auto_now_add` one the events' time. The values go to psycopg as
    they are: a model instance, each of its fields prepared by Django, cost a step as much as
    the rest of its recording."""

    model: type[models.Model]
    values: Mapping[str, Any]

    def inserted(self, now: datetime) -> list[Any]:
        """The values in the order of its INSERT's columns (`inserted_fields`)."""
        return [column.value(self.values, now) for column in inserted_columns(self.model)]


@dataclass(frozen=True)
class InsertedColumn:
    """How one field of an `Alongside` record gets its value."""

    attname: str
    field: Any
    stamped: bool  # auto_now_add or auto_now: the events' time
    json: bool  # a JSONField: encoded by its encoder, as Django would, to text

    def value(self, values: Mapping[str, Any], now: datetime) -> Any:
        if self.attname in values:
            value = values[self.attname]
        elif self.stamped:
            return now
        else:
            value = self.field.get_default()
        return json.dumps(value, cls=self.field.encoder) if self.json else value


@lru_cache(maxsize=16)
def inserted_columns(model: type[models.Model]) -> tuple[InsertedColumn, ...]:
    return tuple(
        InsertedColumn(
            attname=field.attname,
            field=field,
            stamped=bool(
                getattr(field, "auto_now_add", False) or getattr(field, "auto_now", False)
            ),
            json=isinstance(field, models.JSONField),
        )
        for field in inserted_fields(model)
    )


EVENT_FIELDS = ("run", "seq", "kind", "step", "data", "created_at")


# A prepare_threshold psycopg never reaches: while the append runs, its session prepares what
# asks to be prepared, and only that.
PREPARED_WHEN_ASKED = 2**31 - 1


def prepared_execute(connection: Any, statement: str, params: list[Any]) -> int:
    """Execute `statement` as a statement its session prepared (parsed and planned once per
    session, not at each step), its parameters sent apart from it; how many rows it returned.

    Django's cursor merges parameters into the text, which can be neither prepared nor kept:
    this statement goes through psycopg's own cursor, on the session `statement_session` gives,
    with Django's translation of its errors, and logged as Django's cursor would for whoever
    logs queries (DEBUG, a test). Django's prepare_threshold (None) refuses even a statement
    that asks to be prepared; it is lifted for this statement alone, so the session's other
    queries are neither prepared nor counted (psycopg would keep the text of the last hundred,
    their values in it, to count them)."""
    connection.validate_no_broken_transaction()
    started = time.monotonic()
    with connection.wrap_database_errors, statement_session(connection.alias) as session:
        cursor = appending_cursor(session)
        threshold, session.prepare_threshold = session.prepare_threshold, PREPARED_WHEN_ASKED
        try:
            cursor.execute(statement, params, prepare=True)
        finally:
            session.prepare_threshold = threshold
        returned = cursor.rowcount
    if connection.queries_logged:
        spent = time.monotonic() - started
        connection.queries_log.append({"sql": statement, "time": f"{spent:.3f}"})
    return returned


def appending_cursor(session: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """The cursor a session's appends go through, kept with the session: a new cursor finds
    again how to send each type of value (its dumpers), which cost a third of the statement's
    own CPU. A session is used by one thread at a time, and its cursor with it."""
    cursor: psycopg.Cursor[Any] | None = getattr(session, "loop_appending_cursor", None)
    if cursor is None or cursor.closed:
        cursor = psycopg.Cursor(session)
        session.loop_appending_cursor = cursor  # type: ignore[attr-defined]
    return cursor


@lru_cache(maxsize=64)
def appending(
    alias: str,
    events: int,
    fenced: bool,
    announced: Callable[[str], str] | None,
    alongside: tuple[type[models.Model], ...],
) -> str:
    """The statement that appends `events` events (fenced on the run's attempt or not, announced
    by the transport's `announced` or not) with one record of each model in `alongside`, its
    parameters in `append_all`'s order. Made once per shape: building it (each field's cast, the
    parts joined) cost as much of a step as the round trip."""
    connection = connections[alias]
    insert = values_insert(RunEvent, fields_of(RunEvent, EVENT_FIELDS), events, connection)
    if fenced:
        runs = connection.ops.quote_name(AgentRun._meta.db_table)
        insert += f" WHERE EXISTS (SELECT 1 FROM {runs} WHERE id = %s AND attempt = %s)"  # noqa: S608
    insert += " RETURNING run_id, seq"
    statement = announced(insert) if announced is not None else insert
    return with_alongside(statement, alongside, connection)


@lru_cache(maxsize=16)
def fields_of(model: type[models.Model], names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(model._meta.get_field(name) for name in names)


@lru_cache(maxsize=16)
def inserted_fields(model: type[models.Model]) -> tuple[Any, ...]:
    """The fields an INSERT of a `model` record writes: all but its generated primary key."""
    return tuple(field for field in model._meta.concrete_fields if not field.primary_key)


def values_insert(
    model: type[models.Model], fields: Sequence[Any], rows: int, connection: Any
) -> str:
    """`INSERT INTO model (fields) SELECT * FROM (VALUES …)` for `rows` rows, each value a
    parameter cast as its field wants, so a WHERE can follow."""
    quote = connection.ops.quote_name
    columns = [field.column for field in fields]
    row = "(" + ", ".join(f"%s::{field.cast_db_type(connection)}" for field in fields) + ")"
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "  # noqa: S608
        f"SELECT * FROM (VALUES {', '.join([row] * rows)}) AS appended"
    )


def with_alongside(statement: str, models_: Sequence[type[models.Model]], connection: Any) -> str:
    """`statement` (an INSERT, or a WITH whose first part is the INSERT of the events) with an
    insert of a record of each of `models_` put in front as data-modifying WITH parts of their
    own, each written only if the events are (so the run's fence holds for them too); their
    parameters come after the statement's."""
    if not models_:
        return statement
    parts = []
    for index, model in enumerate(models_):
        fields = inserted_fields(model)
        insert = values_insert(model, fields, 1, connection)
        # Names and SQL of our own making; every value is a parameter.
        parts.append(f"alongside_{index} AS ({insert} WHERE EXISTS (SELECT 1 FROM event))")  # noqa: S608
    if statement.startswith("WITH event AS ("):
        head, _, tail = statement.rpartition(") SELECT ")
        return f"{head}), {', '.join(parts)} SELECT {tail}"
    return f"WITH event AS ({statement}), {', '.join(parts)} SELECT run_id, seq FROM event"  # noqa: S608


class RunEvent(models.Model):
    """One event of a run, numbered in the order it happened. Rows are appended, never updated."""

    # No index of its own: the unique (run, seq) serves every look by run, and each event
    # written would update one more index.
    run = models.ForeignKey(
        AgentRun, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=32, choices=choices(list(EVENT_TYPES)))
    step = models.PositiveIntegerField(default=0)
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = RunEventManager()

    class Meta:
        ordering = ("run", "seq")
        constraints = (models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique"),)

    def __str__(self) -> str:
        return f"Run {self.run_id} #{self.seq} {self.kind}"

    @property
    def event(self) -> Event | Unreadable:
        """The row as its typed event, what every reader of the log goes through (Unreadable if
        a later Loop wrote it in a shape this version cannot load)."""
        return loaded(self.kind, self.data)


class ToolExecution(models.Model):
    """The audit record of a tool call a run made (or was refused): written by the recorder, one
    row per ToolCallFinished, read by the console. Its table keeps the name it had when it was
    the tools app's."""

    # No index of its own: the (run, step) index serves every look by run.
    run = models.ForeignKey(
        AgentRun, on_delete=models.CASCADE, related_name="tool_executions", db_index=False
    )
    step = models.PositiveIntegerField()
    call_id = models.CharField(max_length=CALL_ID_CHARS)
    tool = models.CharField(max_length=TOOL_NAME_CHARS)
    arguments = models.TextField()
    status = models.CharField(max_length=16, choices=choices(ToolStatus))
    # What the model saw: the output of a call that worked, the error of one that did not.
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)
    duration = models.FloatField()
    policy = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the retention cleared `result` and `error` (agent/retention.py); tool, status and
    # duration stay for the accounting.
    pruned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tools_toolexecution"
        ordering = ("run", "step", "id")
        indexes = (
            models.Index(fields=["run", "step"], name="tools_toole_run_id_e1a408_idx"),
            models.Index(fields=["tool", "status"], name="tools_toole_tool_e58a6d_idx"),
        )

    def __str__(self) -> str:
        return f"{self.tool} ({self.status}) in run {self.run_id} step {self.step}"


class BreakerTrip(models.Model):
    """The circuit breaker stopped a run: which tool, why, and the failures that led there."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="breaker_trips")
    step = models.PositiveIntegerField()
    tool = models.CharField(max_length=TOOL_NAME_CHARS)
    reason = models.CharField(max_length=32, choices=choices(sorted(BREAKER_REASONS)))
    failures = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"Breaker on {self.tool} in run {self.run_id} ({self.reason})"


class RunResume(models.Model):
    """A worker took up a run where it had stopped: its worker was lost or handed it back, or its
    owner (or an operator) asked it to go on."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="resumes_log")
    attempt = models.PositiveIntegerField()
    reason = models.CharField(max_length=32, choices=choices(ResumeReason))
    lost_worker = models.CharField(max_length=200, blank=True)
    requested_by = models.ForeignKey(  # a continue's owner or operator
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "attempt")

    def __str__(self) -> str:
        return f"Run {self.run_id} attempt {self.attempt} ({self.reason})"

    @property
    def by(self) -> ContinuedBy | None:
        """Who asked a continue, as RunResumed says it (None: not a continue, or asker gone)."""
        if self.requested_by_id is None:
            return None
        if self.requested_by_id == self.run.user_id:
            return ContinuedBy.OWNER
        return ContinuedBy.OPERATOR


# The usage page's rollup tables (console/rollup.py), registered with the agent's models.
from agent.usage import UsageDay, UsageGroup, UsageMark  # noqa: E402, F401


class QueuedTask(models.Model):
    """A task its person sent while a run was going in the conversation. It waits its turn: when
    the conversation's live run ends, the oldest one waiting becomes its next run (in the same
    transaction as that end: agent.runs.start_next_queued). Sent "now" (`sent_to`), it goes to
    the live run instead, whose model reads it before its next turn (PersonSaid in the run's
    log); one the run ended without reading waits its turn like the others."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="queued_tasks"
    )
    text = models.TextField()
    # The model it runs on (factory.ModelChoice.name), picked when it was sent; "" for the one
    # the conversation goes on with when it starts.
    model = models.CharField(max_length=200, blank=True, default="")
    sent_to = models.ForeignKey(
        AgentRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("pk",)

    def __str__(self) -> str:
        return self.text[:60]


class Rating(models.TextChoices):
    UP = "up", "Good answer"
    DOWN = "down", "Bad answer"


class RunFeedback(models.Model):
    """What a run's person thought of its answer: a thumb up or down and, if they say, why. One
    per run, changed as often as they like; operators read it on the run's page in the console
    and filter the runs by it."""

    run = models.OneToOneField(AgentRun, on_delete=models.CASCADE, related_name="feedback")
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on run {self.run_id}"
