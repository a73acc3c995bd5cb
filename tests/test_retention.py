"""Retention (agent/retention.py): old runs lose their event log and tool outputs, old finished
jobs go, in batches; the accounting stays, live runs and live jobs are never touched, and every
reader of a run shows a pruned one as such (chat, console, export, Continue, runagent)."""

import json
import math
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agent.models import AgentRun, ToolExecution
from agent.retention import prune
from agent.runs import (
    LogPruned,
    continue_run,
    continue_run_as_operator,
    new_conversation,
    start_run,
)
from agent.transcripts import transcripts
from core.events import RunStatus
from core.loop import Limits
from engine.execution import execute_run
from engine.tasks import prune_old_records_job

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
HTMX = {"HX-Request": "true"}
ACCOUNTED = (
    "status",
    "halt_reason",
    "cause",
    "task",
    "answer",
    "error",
    "iterations",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "created_at",
    "started_at",
    "finished_at",
    "attempt",
    "resumes",
)


def demo_run(user, **limits: int) -> AgentRun:
    """The demo as the site runs it, in a conversation: three tool calls, one of them failing
    (read_file of a file not there yet); with Limits(2) it halts and may be continued."""
    limit = Limits(limits["max_iterations"]) if limits else None
    run = start_run(user, DEMO, model="mock", conversation=new_conversation(user), limits=limit)
    return execute_run(run)


def ended_days_ago(run: AgentRun, days: float) -> AgentRun:
    AgentRun.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=days))
    run.refresh_from_db()
    return run


def accounting(run: AgentRun) -> dict:
    run.refresh_from_db()
    executions = list(
        run.tool_executions.order_by("pk").values_list("call_id", "tool", "status", "duration")
    )
    return {
        **{name: getattr(run, name) for name in ACCOUNTED},
        "executions": executions,
        "trips": list(run.breaker_trips.values_list("tool", "reason")),
    }


@pytest.fixture
def keep_30_days(settings):
    settings.LOOP_KEEP_EVENTS_DAYS = 30
    settings.LOOP_KEEP_JOBS_DAYS = 30
    return settings


def test_by_default_nothing_is_pruned(alice, workspaces, settings):
    assert (settings.LOOP_KEEP_EVENTS_DAYS, settings.LOOP_KEEP_JOBS_DAYS) == (0, 0)
    run = ended_days_ago(demo_run(alice), 3650)
    events = run.events.count()
    assert not prune()
    run.refresh_from_db()
    assert run.log_pruned_at is None
    assert run.events.count() == events > 0


def test_an_old_runs_log_and_tool_outputs_go_and_its_accounting_stays(
    alice, workspaces, keep_30_days
):
    run = ended_days_ago(demo_run(alice), 31)
    before = accounting(run)
    assert before["executions"]
    assert any(status != "ok" for *_, status, _ in before["executions"])
    assert ToolExecution.objects.filter(run=run).exclude(result="", error="").exists()
    events = run.events.count()

    pruned = prune()

    assert (pruned.runs, pruned.events, pruned.tool_executions) == (
        1,
        events,
        len(before["executions"]),
    )
    assert accounting(run) == before  # figures, timings, cause, each call's tool/status/duration
    assert run.log_pruned_at is not None
    assert not run.events.exists()
    for execution in run.tool_executions.all():
        assert (execution.result, execution.error) == ("", "")
        assert execution.pruned_at is not None
        assert execution.arguments  # the call itself stays: what was asked, not what came back
    assert not prune()  # a second pass has nothing left to do


def test_only_runs_that_ended_before_the_setting_are_pruned_never_a_live_one(
    alice, bob, workspaces, keep_30_days
):
    old = ended_days_ago(demo_run(alice), 31)
    recent = ended_days_ago(demo_run(alice), 29)
    live = demo_run(bob, max_iterations=2)  # halted, then made to look as if a worker had it
    AgentRun.objects.filter(pk=live.pk).update(
        status=RunStatus.RUNNING,
        created_at=timezone.now() - timedelta(days=400),
        finished_at=timezone.now() - timedelta(days=400),  # a stale end from before it went on
    )
    queued = demo_run(bob, max_iterations=2)
    AgentRun.objects.filter(pk=queued.pk).update(
        status=RunStatus.QUEUED, finished_at=timezone.now() - timedelta(days=400)
    )
    kept = {run.pk: run.events.count() for run in (recent, live, queued)}

    assert prune().runs == 1

    assert AgentRun.objects.get(pk=old.pk).log_pruned_at is not None
    for run_id, events in kept.items():
        run = AgentRun.objects.get(pk=run_id)
        assert run.log_pruned_at is None
        assert run.events.count() == events > 0
        assert not run.tool_executions.filter(pruned_at__isnull=False).exists()


def test_pruning_works_in_batches_of_rows(alice, workspaces, keep_30_days):
    runs = [ended_days_ago(demo_run(alice), 40 + n) for n in range(3)]
    events = sum(run.events.count() for run in runs)
    batch = 4
    with CaptureQueriesContext(connection) as queries:
        pruned = prune(batch=batch)
    assert pruned.runs == 3
    assert pruned.events == events
    deletes = [q["sql"] for q in queries if q["sql"].startswith('DELETE FROM "agent_runevent"')]
    assert len(deletes) >= math.ceil(events / batch)
    # Each DELETE names its rows, at most `batch` of them.
    assert all(q.count(",") < batch for q in deletes)
    marks = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "agent_agentrun"')]
    assert len(marks) == 3  # batch // 10 rounds to one run a transaction


def insert_job(status: str, finished_days_ago: float) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status) "
            "VALUES ('runs', 'agent.work_run', '{}', %s) RETURNING id",
            [status],
        )
        job_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO procrastinate_events (job_id, type, at) VALUES (%s, 'deferred', %s)",
            [job_id, timezone.now() - timedelta(days=finished_days_ago)],
        )
        cursor.execute(
            "UPDATE procrastinate_events SET at = %s WHERE job_id = %s",
            [timezone.now() - timedelta(days=finished_days_ago), job_id],
        )
    return job_id


def jobs_left(ids: list[int]) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM procrastinate_jobs WHERE id = ANY(%s)", [ids])
        return {row[0] for row in cursor.fetchall()}


def events_left(ids: list[int]) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id FROM procrastinate_events WHERE job_id = ANY(%s)", [ids])
        return {row[0] for row in cursor.fetchall()}


def test_old_finished_jobs_go_with_their_events_and_live_jobs_stay(keep_30_days):
    finished = ("succeeded", "failed", "cancelled", "aborted")
    old = [insert_job(status, 31) for status in finished]
    recent = [insert_job(status, 29) for status in finished]
    live = [insert_job("todo", 400), insert_job("doing", 400)]

    pruned = prune(batch=3)

    assert pruned.jobs == len(old)
    assert jobs_left(old + recent + live) == set(recent + live)
    assert events_left(old) == set()
    assert events_left(recent + live) == set(recent + live)


def test_the_periodic_task_prunes(alice, workspaces, keep_30_days):
    run = ended_days_ago(demo_run(alice), 31)
    assert async_to_sync(prune_old_records_job.func)(0) == 1
    run.refresh_from_db()
    assert run.log_pruned


@pytest.fixture
def pruned_halted_run(alice, workspaces, keep_30_days) -> AgentRun:
    """A run that halted and could have been continued, pruned."""
    run = ended_days_ago(demo_run(alice, max_iterations=2), 31)
    assert run.status == RunStatus.HALTED
    prune()
    run.refresh_from_db()
    assert run.log_pruned
    return run


def test_a_pruned_run_cannot_be_continued_and_says_why(pruned_halted_run, alice, operator):
    run = pruned_halted_run
    said = f"its log was pruned on {run.log_pruned_at:%Y-%m-%d}"
    with pytest.raises(LogPruned, match=said):
        continue_run(alice, run.pk)
    with pytest.raises(LogPruned, match=said):
        continue_run_as_operator(operator, run.pk)

    client = Client()
    client.force_login(alice)
    refused = client.post(reverse("chat:continue", args=[run.pk]), headers=HTMX)
    assert refused.headers["HX-Retarget"] == "#send-error"
    assert said in refused.text
    with pytest.raises(CommandError, match="pruned"):
        call_command("runagent", "--resume", str(run.pk))
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_the_chat_shows_a_pruned_run_with_a_note_and_its_answer(pruned_halted_run, alice):
    run = pruned_halted_run
    client = Client()
    client.force_login(alice)
    page = client.get(reverse("chat:conversation", args=[run.conversation_id]))
    assert page.status_code == 200
    text = page.text
    assert f"Log pruned on {timezone.localtime(run.log_pruned_at):%Y-%m-%d}" in text
    assert run.answer.split(".")[0] in text  # its end, from the run's row
    assert reverse("chat:continue", args=[run.pk]) not in text
    fragment = client.get(reverse("chat:run", args=[run.pk]))
    assert fragment.status_code == 200
    assert "Log pruned on" in fragment.text


def test_the_console_and_the_export_show_a_pruned_run(pruned_halted_run, operator, client):
    run = pruned_halted_run
    page = client.get(reverse("admin:agent_agentrun_change", args=[run.pk]))
    assert page.status_code == 200
    assert f"Log pruned on {timezone.localtime(run.log_pruned_at):%Y-%m-%d}" in page.text
    assert 'id="continue-run"' not in page.text

    exported = client.get(reverse("admin:agent_agentrun_transcript", args=[run.pk]))
    transcript = json.loads(exported.content)
    assert transcript["events"] == []
    assert transcript["run"]["log_pruned_at"] == run.log_pruned_at.isoformat()
    assert transcript["run"]["status"] == RunStatus.HALTED
    assert transcripts(AgentRun.objects.filter(pk=run.pk))[0]["run"]["tool_calls"] == run.tool_calls

    execution = ToolExecution.objects.filter(run=run).first()
    shown = client.get(reverse("admin:agent_toolexecution_change", args=[execution.pk]))
    assert shown.status_code == 200
    assert "Pruned at" in shown.text
