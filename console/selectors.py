"""What the operators' console reads: a run's timeline and transcript, usage per user and day,
breaker trip counts, and which runs recalled a memory. Plain selectors; the admin renders them."""

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from agent.events import RunStatus, event_from_dict
from agent.history import messages_from_events
from agent.llm.base import Message
from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from agent.wording import resumed_text
from memory.models import Memory
from tools.base import ToolStatus

# A tool call that ran and did not work. A skipped call never ran: the run stopped first.
# An interrupted call's worker stopped under it: as far as anyone knows, it did not work.
FAILED_TOOL_STATUSES = (
    ToolStatus.ERROR,
    ToolStatus.TIMEOUT,
    ToolStatus.DENIED,
    ToolStatus.INTERRUPTED,
)
TRANSCRIPT_FORMAT = "loop.transcript/1"


def failed_tool_calls() -> Subquery:
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
class RecalledMemoryEntry:
    """One memory of a memories_recalled event, with the memory if it is still stored."""

    id: int
    text: str
    score: float
    parts: dict[str, float]
    memory: Memory | None


@dataclass(frozen=True)
class TimelineEntry:
    seq: int
    kind: str
    step: int
    at: datetime
    data: dict[str, Any]
    execution: ToolExecution | None = None
    trip: BreakerTrip | None = None
    recalled: list[RecalledMemoryEntry] = field(default_factory=list)

    @property
    def resumed(self) -> str:
        if self.kind != "run_resumed":
            return ""
        return resumed_text(self.data["reason"], self.data.get("by", ""))

    @property
    def reasoning(self) -> str:
        # Older events were recorded before models could report their reasoning.
        return self.data.get("reasoning", "")

    @property
    def tokens(self) -> int:
        return self.data.get("prompt_tokens", 0) + self.data.get("completion_tokens", 0)


def timeline(run: AgentRun) -> list[TimelineEntry]:
    """Every event of the run in order, each with the audit rows it produced. Four queries
    whatever the length of the run."""
    events = list(run.events.order_by("seq"))
    executions = {execution.call_id: execution for execution in run.tool_executions.all()}
    trips = {trip.step: trip for trip in run.breaker_trips.all()}
    recalled_ids = {
        memory["id"]
        for event in events
        if event.kind == "memories_recalled"
        for memory in event.data["memories"]
    }
    memories = Memory.objects.defer("embedding").in_bulk(recalled_ids) if recalled_ids else {}
    entries = []
    for event in events:
        extra: dict[str, Any] = {}
        match event.kind:
            case "tool_call_finished":
                extra["execution"] = executions.get(event.data["call_id"])
            case "breaker_tripped":
                extra["trip"] = trips.get(event.step)
            case "memories_recalled":
                extra["recalled"] = [
                    RecalledMemoryEntry(
                        m["id"], m["text"], m["score"], m["parts"], memories.get(m["id"])
                    )
                    for m in event.data["memories"]
                ]
        entries.append(
            TimelineEntry(event.seq, event.kind, event.step, event.created_at, event.data, **extra)
        )
    return entries


def gist(kind: str, data: dict[str, Any]) -> str:
    """One line saying what an event was, for lists."""
    match kind:
        case "run_started":
            return f"{data['model']}: {short(data['task'])}"
        case "memories_recalled":
            return f"{len(data['memories'])} recalled: " + ", ".join(
                f"memory {m['id']} ({m['score']:.2f})" for m in data["memories"]
            )
        case "model_replied":
            asked = ", ".join(call["name"] for call in data["tool_calls"])
            said = f"asks for {asked}" if asked else short(data["text"])
            return f"{said} ({data['prompt_tokens'] + data['completion_tokens']} tokens)"
        case "tool_call_started":
            return f"{data['tool']} {short(data['arguments'], 60)}"
        case "tool_call_finished":
            return (
                f"{data['tool']} {data['status']} in {data['duration']:.3f}s: {short(data['text'])}"
            )
        case "breaker_tripped":
            return f"{data['tool']}: {data['reason']}"
        case "run_halted":
            return f"{data['reason']}: {short(data['detail'])}"
        case "run_finished":
            reason = f" ({data['halt_reason']})" if data.get("halt_reason") else ""
            return f"{data['status']}{reason}: {short(data['answer'] or data.get('error', ''))}"
        case "run_resumed":
            lost = f", lost {data['lost_worker']}" if data.get("lost_worker") else ""
            text = resumed_text(data["reason"], data.get("by", ""))
            return f"{text} (attempt {data['attempt']}{lost})"
    return ""


def short(text: str, length: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= length else text[: length - 1] + "…"


def run_summary(run: AgentRun) -> dict[str, Any]:
    def when(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "id": run.pk,
        "user": run.user.get_username(),
        "task": run.task,
        "status": run.status,
        "halt_reason": run.halt_reason,
        "answer": run.answer,
        "error": run.error,
        "provider": run.provider,
        "model": run.model,
        "limits": run.limits,
        "iterations": run.iterations,
        "tool_calls": run.tool_calls,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "created_at": when(run.created_at),
        "started_at": when(run.started_at),
        "finished_at": when(run.finished_at),
        "cancel_requested_at": when(run.cancel_requested_at),
        "attempt": run.attempt,
        "worker": run.worker,
        "resumes": run.resumes,
    }


def transcripts(runs: QuerySet[AgentRun]) -> list[dict[str, Any]]:
    """Each run's summary and its whole event log in order: two queries for any selection."""
    runs = list(runs.select_related("user").order_by("pk"))
    events = RunEvent.objects.filter(run__in=runs).order_by("run_id", "seq")
    by_run = {
        run_id: list(group) for run_id, group in itertools.groupby(events, lambda e: e.run_id)
    }
    return [
        {
            "format": TRANSCRIPT_FORMAT,
            "run": run_summary(run),
            "events": [
                {
                    "seq": event.seq,
                    "kind": event.kind,
                    "step": event.step,
                    "created_at": event.created_at.isoformat(),
                    "data": event.data,
                }
                for event in by_run.get(run.pk, [])
            ],
        }
        for run in runs
    ]


def history_from_transcript(transcript: dict[str, Any]) -> list[Message]:
    """The message history the model saw, rebuilt from an exported transcript alone."""
    events = sorted(transcript["events"], key=lambda event: event["seq"])
    return messages_from_events(event_from_dict(e["kind"], e["data"]) for e in events)


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

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


COUNTED = ("runs", "succeeded", "halted", "failed", "cancelled", "tool_calls", "tool_failures")
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
    for figures in per_day:
        day_row = row(figures.pop("day"), figures.pop("user_id"))
        day_row.username = figures.pop("user__username")
        for name, value in figures.items():
            setattr(day_row, name, value)
    of_runs = {"run__created_at__gte": start, "run__created_at__lt": end}
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
        for figures in counted:
            setattr(row(figures["day"], figures["run__user_id"]), name, figures["n"])
    return sorted(rows.values(), key=lambda r: (-r.day.toordinal(), r.username))


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
    run: AgentRun
    score: float
    parts: dict[str, float]


def recalls_of(memory: Memory, limit: int = 100) -> list[Recall]:
    """The runs that recalled `memory`, newest first, with the score it had each time.

    Only the owner's runs can have recalled it, so the search goes through their runs (an index)
    rather than through every event of every run.
    """
    events = (
        RunEvent.objects.filter(
            run__user_id=memory.owner_id,
            kind="memories_recalled",
            data__memories__contains=[{"id": memory.pk}],
        )
        .select_related("run")
        .order_by("-run_id")[:limit]
    )
    recalls = []
    for event in events:
        recalled = next(m for m in event.data["memories"] if m["id"] == memory.pk)
        recalls.append(Recall(event.run, recalled["score"], recalled["parts"]))
    return recalls
