"""What the operators' console reads: a run's timeline, usage per user and day, breaker trip
counts, and which runs recalled a memory. Plain selectors; the admin renders them. A run's
transcript is agent/transcripts.py's, shared with a person's own export."""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from approvals.models import ApprovalRequest
from console import rollup
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    BreakerTripped,
    Decision,
    Event,
    MemoriesRecalled,
    ModelReplied,
    PersonSaid,
    RunFinished,
    RunHalted,
    RunResumed,
    RunStarted,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    Unreadable,
)
from core.recalled import RecalledMemory
from core.results import ToolStatus
from core.text import excerpt
from core.wording import resumed_text
from memory.models import Memory

# A tool call that ran and did not work (the rollup counts the same).
FAILED_TOOL_STATUSES = rollup.FAILED_TOOL_STATUSES
# How much of a text a one-line gist shows.
GIST_WIDTH = 80


def failed_tool_calls() -> Coalesce:
    """A run's failed tool calls, as an annotation: one indexed lookup per row shown, not a join
    and GROUP BY over every run."""
    failed = (
        ToolExecution.objects.filter(run=OuterRef("pk"), status__in=FAILED_TOOL_STATUSES)
        .order_by()
        .values("run")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(failed, output_field=IntegerField()), 0)


@dataclass(frozen=True)
class RunRecords:
    """The audit rows a run's events link to, looked up once for the whole timeline."""

    executions: Mapping[str, ToolExecution] = field(default_factory=dict)
    trips: Mapping[int, BreakerTrip] = field(default_factory=dict)
    memories: Mapping[int, Memory] = field(default_factory=dict)
    approvals: Mapping[str, ApprovalRequest] = field(default_factory=dict)  # by call id


@dataclass(frozen=True)
class TimelineEntry:
    """One event of a run's timeline, with the audit rows it produced. `recalled` pairs each
    memory a MemoriesRecalled event recalled with that memory if it is still stored."""

    seq: int
    event: Event | Unreadable
    at: datetime
    execution: ToolExecution | None = None
    trip: BreakerTrip | None = None
    approval: ApprovalRequest | None = None  # the audit row of a call that asked
    recalled: list[tuple[RecalledMemory, Memory | None]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.event.kind

    @property
    def step(self) -> int:
        return getattr(self.event, "step", 0)

    @property
    def step_anchor(self) -> str:
        """The `#step-N` a link to a step of the run lands on: its model turn."""
        return f"step-{self.event.step}" if isinstance(self.event, ModelReplied) else ""

    @property
    def gist(self) -> str:
        return gist(self.event)

    @property
    def tokens(self) -> int:
        match self.event:
            case ModelReplied() | RunFinished():
                return self.event.prompt_tokens + self.event.completion_tokens
        return 0

    @property
    def call_worked(self) -> bool:
        return isinstance(self.event, ToolCallFinished) and self.event.status == ToolStatus.OK

    @property
    def resumed(self) -> str:
        if not isinstance(self.event, RunResumed):
            return ""
        return resumed_text(self.event.reason, self.event.by)


def entry_for(
    seq: int, event: Event | Unreadable, at: datetime, records: RunRecords | None = None
) -> TimelineEntry:
    """One timeline entry, linked to the run's `records` it produced (none given: no links, and
    every recalled memory reads as no longer stored). Reads nothing from the database."""
    records = records or RunRecords()
    match event:
        case ToolCallFinished():
            return TimelineEntry(seq, event, at, execution=records.executions.get(event.call_id))
        case BreakerTripped():
            return TimelineEntry(seq, event, at, trip=records.trips.get(event.step))
        case MemoriesRecalled():
            recalled = [(memory, records.memories.get(memory.id)) for memory in event.memories]
            return TimelineEntry(seq, event, at, recalled=recalled)
        case ApprovalRequested() | ApprovalDecided():
            return TimelineEntry(seq, event, at, approval=records.approvals.get(event.call_id))
    return TimelineEntry(seq, event, at)


def timeline(run: AgentRun) -> list[TimelineEntry]:
    """Every event of the run in order, each with the audit rows it produced. Five queries
    whatever the length of the run."""
    rows = list(run.events.order_by("seq"))
    events = [row.event for row in rows]
    recalled_ids = {
        memory.id
        for event in events
        if isinstance(event, MemoriesRecalled)
        for memory in event.memories
    }
    records = RunRecords(
        executions={execution.call_id: execution for execution in run.tool_executions.all()},
        trips={trip.step: trip for trip in run.breaker_trips.all()},
        memories=Memory.objects.defer("embedding").in_bulk(recalled_ids) if recalled_ids else {},
        approvals={request.call_id: request for request in run.approvals.all()},
    )
    return [
        entry_for(row.seq, event, row.created_at, records)
        for row, event in zip(rows, events, strict=True)
    ]


def gist(event: Event | Unreadable) -> str:
    """One line saying what an event was, for lists."""
    match event:
        case RunStarted():
            return f"{event.model}: {excerpt(event.task, GIST_WIDTH)}"
        case MemoriesRecalled():
            return f"{len(event.memories)} recalled: " + ", ".join(
                f"memory {memory.id} ({memory.score:.2f})" for memory in event.memories
            )
        case ModelReplied():
            asked = ", ".join(call.name for call in event.tool_calls)
            said = f"asks for {asked}" if asked else excerpt(event.text, GIST_WIDTH)
            return f"{said} ({event.prompt_tokens + event.completion_tokens} tokens)"
        case ToolCallStarted():
            return f"{event.tool} {excerpt(event.arguments, 60)}"
        case ToolCallFinished():
            said = excerpt(event.text, GIST_WIDTH)
            return f"{event.tool} {event.status} in {event.duration:.3f}s: {said}"
        case BreakerTripped():
            return f"{event.tool}: {event.reason}"
        case RunHalted():
            return f"{event.reason}: {excerpt(event.detail, GIST_WIDTH)}"
        case RunFinished():
            reason = f" ({event.halt_reason})" if event.halt_reason else ""
            said = excerpt(event.answer or event.error, GIST_WIDTH)
            return f"{event.status}{reason}: {said}"
        case PersonSaid():
            return f"the person sent: {excerpt(event.text, GIST_WIDTH)}"
        case RunResumed():
            lost = f", lost {event.lost_worker}" if event.lost_worker else ""
            return f"{resumed_text(event.reason, event.by)} (attempt {event.attempt}{lost})"
        case ApprovalRequested():
            return f"{event.tool} waits for a decision: {event.why}"
        case ApprovalDecided():
            return decided_gist(event)
    return ""


def decided_gist(event: ApprovalDecided) -> str:
    """Who decided what on a call that waited: the decision, the edit, the reason."""
    who = f" by {event.by}" if event.by else " by Loop"
    match event.decision:
        case Decision.EDIT:
            return f"{event.tool} edited and approved{who}: {excerpt(event.arguments, 60)}"
        case Decision.DENY:
            reason = f": {excerpt(event.reason, GIST_WIDTH)}" if event.reason else ""
            return f"{event.tool} denied{who}{reason}"
        case Decision.APPROVE:
            return f"{event.tool} approved{who}"
    return f"{event.tool} {event.decision}: not run"


@dataclass
class UsageRow:
    day: date
    user_id: int
    username: str = ""
    runs: int = 0
    succeeded: int = 0
    halted: int = 0
    failed: int = 0
    cancelled: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    breaker_trips: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rows: int = 1  # of a whole day's sum (usage_per_day): how many users' rows it sums

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


COUNTED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.HALTED, RunStatus.FAILED, RunStatus.CANCELLED)
COUNTED: tuple[str, ...] = (
    "runs",
    "succeeded",
    "halted",
    "failed",
    "cancelled",
    "tool_calls",
    "tool_failures",
)
COUNTED += ("breaker_trips", "prompt_tokens", "completion_tokens")


def day_bounds(since: date, until: date) -> tuple[datetime, datetime]:
    """From the start of `since` to the end of `until`, in the site's time zone."""
    zone = timezone.get_current_timezone()
    start = datetime.combine(since, time.min, tzinfo=zone)
    return start, datetime.combine(until + timedelta(days=1), time.min, tzinfo=zone)


def usage(since: date, until: date, user_id: int | None = None) -> list[UsageRow]:
    """Per user and per day (the day a run was created), newest day first: what the runs of that
    day did. Three grouped queries whatever the range."""
    start, end = day_bounds(since, until)
    runs = AgentRun.objects.filter(created_at__gte=start, created_at__lt=end)
    if user_id is not None:
        runs = runs.filter(user_id=user_id)
    rows: dict[tuple[date, int], UsageRow] = {}

    def row(day: date, user: int) -> UsageRow:
        return rows.setdefault((day, user), UsageRow(day, user))

    by_status = {
        status: Count("pk", filter=Q(status=status))
        for status in (
            RunStatus.SUCCEEDED,
            RunStatus.HALTED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
        )
    }
    per_day = (
        runs.annotate(day=TruncDate("created_at"))
        .values("day", "user_id", "user__username")
        .order_by()
        .annotate(
            runs=Count("pk"),
            tool_calls=Sum("tool_calls"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            **{str(status): count for status, count in by_status.items()},
        )
    )
    for day_figures in per_day:
        figures: dict[str, Any] = dict(day_figures)
        day_row = row(figures.pop("day"), figures.pop("user_id"))
        day_row.username = figures.pop("user__username")
        for name, value in figures.items():
            setattr(day_row, name, value)
    of_runs: dict[str, object] = {"run__created_at__gte": start, "run__created_at__lt": end}
    if user_id is not None:
        of_runs["run__user_id"] = user_id
    for name, model, statuses in (
        ("tool_failures", ToolExecution, {"status__in": FAILED_TOOL_STATUSES}),
        ("breaker_trips", BreakerTrip, {}),
    ):
        counted = (
            model.objects.filter(**of_runs, **statuses)
            .annotate(day=TruncDate("run__created_at"))
            .values("day", "run__user_id")
            .order_by()
            .annotate(n=Count("pk"))
        )
        for counts in counted:
            setattr(row(counts["day"], counts["run__user_id"]), name, counts["n"])
    return sorted(rows.values(), key=lambda r: (-r.day.toordinal(), r.username))


class UsagePages(Sequence[UsageRow]):
    """The usage rows of a range, newest day first, as a sequence the page's Paginator slices.
    Read from the rollup (console/rollup.py), brought up to date first: the per-day sums of a
    year are a few hundred thousand small rows at most, and only the days a page shows are read
    per user. `usage` reads the same figures from the runs themselves."""

    def __init__(self, since: date, until: date, user_id: int | None = None) -> None:
        self.since, self.until, self.user_id = since, until, user_id
        rollup.refresh(since, until)
        self.days = usage_per_day(since, until, user_id)  # newest first

    def __len__(self) -> int:
        return sum(day.rows for day in self.days)

    def count(self) -> int:  # type: ignore[override]  # what Paginator asks
        return len(self)

    def totals(self) -> dict[str, int]:
        return usage_totals(self.days)

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice):
            return self[index : index + 1][0]
        start, stop, _ = index.indices(len(self))
        if start >= stop:
            return []
        skipped, wanted = 0, []
        for day in self.days:
            if skipped + day.rows > start and skipped < stop:
                wanted.append(day.day)
            skipped += day.rows
        first_skipped = sum(
            day.rows for day in self.days if day.day > max(wanted)
        )  # the rows of the days before the first one shown
        rows = rolled_up_usage(min(wanted), max(wanted), self.user_id)
        return rows[start - first_skipped : stop - first_skipped]


def rolled_up_usage(since: date, until: date, user_id: int | None = None) -> list[UsageRow]:
    """`usage`'s rows, from the rollup as the last refresh left it."""
    rows = []
    for day, user, username, *figures in rollup.per_user(since, until, user_id):
        row = UsageRow(day, user, username)
        for name, value in zip(rollup.FIGURES, figures, strict=True):
            setattr(row, name, value)
        rows.append(row)
    return sorted(rows, key=lambda r: (-r.day.toordinal(), r.username))


def usage_per_day(since: date, until: date, user_id: int | None = None) -> list[UsageRow]:
    """Per day, newest first: what that day's runs did, all users together (or `user_id`'s);
    each day's `rows` is how many users ran something that day (its rows on the usage page).
    From the rollup as the last refresh left it: one query over its rows of the range."""
    days = []
    for day, users, *figures in rollup.per_day(since, until, user_id):
        row = UsageRow(day, 0, rows=users)
        for name, value in zip(rollup.FIGURES, figures, strict=True):
            setattr(row, name, value)
        days.append(row)
    return days


def usage_totals(rows: Iterable[UsageRow]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for usage_row in rows:
        for name in COUNTED:
            totals[name] += getattr(usage_row, name)
    totals["tokens"] = totals["prompt_tokens"] + totals["completion_tokens"]
    return dict(totals)


@dataclass(frozen=True)
class TripCount:
    name: str
    last_7_days: int
    last_30_days: int


def trip_summary(now: datetime | None = None) -> dict[str, list[TripCount]]:
    """Breaker trips per tool and per reason over the last 7 and 30 days, most frequent first."""
    now = now or timezone.now()
    recent = BreakerTrip.objects.filter(created_at__gte=now - timedelta(days=30)).order_by()
    week = Q(created_at__gte=now - timedelta(days=7))
    summary = {}
    for by in ("tool", "reason"):
        counted = recent.values(by).annotate(week=Count("pk", filter=week), month=Count("pk"))
        summary[by] = sorted(
            (TripCount(c[by], c["week"], c["month"]) for c in counted),
            key=lambda count: (-count.last_30_days, count.name),
        )
    return summary


@dataclass(frozen=True)
class Recall:
    """A run that recalled a memory, and the memory as it was recalled (its score then)."""

    run: AgentRun
    recalled: RecalledMemory


def recalls_of(memory: Memory, limit: int = 100) -> list[Recall]:
    """The runs that recalled `memory`, newest first, with the score it had each time.

    Only the owner's runs can have recalled it, so the search goes through their runs (an index)
    rather than through every event of every run.
    """
    rows = (
        RunEvent.objects.filter(
            run__user_id=memory.owner_id,
            kind=MemoriesRecalled.kind,
            data__memories__contains=[{"id": memory.pk}],
        )
        .select_related("run")
        .order_by("-run_id")[:limit]
    )
    recalls = []
    for row in rows:
        match row.event:
            case MemoriesRecalled(memories=recalled):
                this = next(m for m in recalled if m.id == memory.pk)
                recalls.append(Recall(row.run, this))
    return recalls
