"""A run's transcript (loop.transcript/1): its summary and its whole event log, as the log stores
it. The operators' console exports it, and so does a person's own export of their data
(accounts/my_data.py): one builder, so the two can never differ."""

import itertools
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from agent.models import AgentRun, RunEvent
from core.events import event_from_dict
from core.llm import Message
from core.state import messages_from_events

TRANSCRIPT_FORMAT = "loop.transcript/1"


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
        # Set when the retention pruned the log: then "events" is empty, and not because the
        # run did nothing.
        "log_pruned_at": when(run.log_pruned_at),
    }


def transcripts(runs: QuerySet[AgentRun]) -> list[dict[str, Any]]:
    """Each run's summary and its whole event log in order: two queries for any selection.

    An export copies the log rather than reading it: each event's `data` is what the log stores,
    as stored (loop.transcript/1), and `history_from_transcript` reads it back as typed events."""
    chosen = list(runs.select_related("user").order_by("pk"))
    events = RunEvent.objects.filter(run__in=chosen).order_by("run_id", "seq")
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
        for run in chosen
    ]


def history_from_transcript(transcript: dict[str, Any]) -> list[Message]:
    """The message history the model saw, rebuilt from an exported transcript alone."""
    events = sorted(transcript["events"], key=lambda event: event["seq"])
    return messages_from_events(event_from_dict(e["kind"], e["data"]) for e in events)
