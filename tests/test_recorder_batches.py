"""A worker records a model's reply together with what follows it, a tool call's end together with
its audit row: two statements a step, each its own commit, with the fence on every row."""

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, BreakerTrip, ToolExecution
from agent.recorder import RunLost, RunRecorder
from agent.runs import start_run
from core.events import (
    BreakerTripped,
    HaltReason,
    ModelReplied,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)
from core.results import ToolStatus
from engine.execution import claim, execute_run, release

pytestmark = pytest.mark.django_db(transaction=True)


def writes_to(table: str, queries: CaptureQueriesContext) -> int:
    return sum(f'INSERT INTO "{table}"' in query["sql"] for query in queries.captured_queries)


def test_a_step_is_two_statements_its_reply_with_its_calls_start(alice):
    run = start_run(alice, "a task", model="mock")
    script = ScriptedLLM([call("list_files", {}), call("list_files", {"path": "."}), answer("ok")])
    with CaptureQueriesContext(connection) as queries:
        run = execute_run(run, llm=script)
    assert run.status == RunStatus.SUCCEEDED
    kinds = list(run.events.order_by("seq").values_list("kind", flat=True))
    assert kinds == [
        "run_started",
        *("model_replied", "tool_call_started", "tool_call_finished") * 2,
        "model_replied",
        "run_finished",
    ]
    # The start; each step's reply and start, then its end and audit row; the answer and end.
    assert writes_to("agent_runevent", queries) == 1 + 2 * 2 + 1
    assert run.tool_executions.count() == 2
    reply, started = run.events.filter(seq__in=(2, 3)).order_by("seq")
    assert reply.created_at == started.created_at  # one statement wrote both


def test_a_call_end_and_its_audit_row_are_fenced_together(alice):
    run = start_run(alice, "a task", model="mock")
    mine = claim(run.pk, job_id=None, worker="old")
    recorder = RunRecorder(mine.run, batched=True)
    recorder(ModelReplied(step=1, text="", tool_calls=[], prompt_tokens=1, completion_tokens=1))
    assert not run.events.exists()  # held: it goes with what follows
    recorder(ToolCallStarted(step=1, call_id="c1", tool="list_files", arguments="{}"))
    assert run.events.count() == 2
    AgentRun.objects.filter(pk=run.pk).update(attempt=mine.run.attempt + 1)  # taken over
    finished = ToolCallFinished(
        step=1,
        call_id="c1",
        tool="list_files",
        arguments="{}",
        status=ToolStatus.OK,
        text="(empty)",
        duration=0.1,
    )
    with pytest.raises(RunLost):
        recorder(finished)
    assert run.events.count() == 2
    assert not ToolExecution.objects.filter(run=run).exists()


def test_a_run_let_go_keeps_the_reply_its_recorder_held(alice):
    """The worker lets the run go (it is stopping) after the model replied and before anything
    followed: the reply is stored on the way out, so the run's next worker goes on from it
    rather than asking the model again."""
    run = start_run(alice, "a task", model="mock")
    mine = claim(run.pk, job_id=None, worker="stopping")
    recorder = RunRecorder(mine.run, batched=True)
    recorder(ModelReplied(step=1, text="", tool_calls=[], prompt_tokens=1, completion_tokens=1))
    assert not run.events.exists()
    release(mine.run, recorder)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert list(run.events.values_list("kind", flat=True)) == ["model_replied"]


def test_a_session_prepares_the_append_once_and_uses_it_at_every_step(alice: Any) -> None:
    """The append is parsed and planned once per session, not at each step: the session that
    writes a run's steps prepares each shape of append once and uses it at every step after."""
    run = start_run(alice, "a task", model="mock")
    mine = claim(run.pk, job_id=None, worker="w")
    assert mine is not None
    with transaction.atomic():  # one session for the run's writes and for the looks at it
        recorder = RunRecorder(mine.run, batched=True)
        record_steps(recorder, range(1, 3))
        first = prepared_appends()
        record_steps(recorder, range(3, 6))
        after = prepared_appends()
    assert run.events.count() == 15
    assert after == first  # used again, never prepared again
    shapes = [statement for statement in first.values() if "WHERE id = $" in statement]
    assert any("alongside_0" in shape for shape in shapes)  # a call's end with its audit row
    assert any("), ($" in shape.split("AS appended")[0] for shape in shapes)  # reply and start


def test_audit_rows_are_stored_as_their_models_would_store_them(alice: Any) -> None:
    """The audit rows go in the events' statement from the events' values, not through a model
    instance: each field is stored as the model would store it (an enum as its value, the JSON
    of a breaker's failures, an unset field its default, the time the events got)."""
    run = start_run(alice, "a task", model="mock")
    mine = claim(run.pk, job_id=None, worker="w")
    assert mine is not None
    recorder = RunRecorder(mine.run, batched=True)
    failed = ToolCallFinished(
        step=1,
        call_id="c1",
        tool="run_code",
        arguments='{"code": "1/0"}',
        status=ToolStatus.ERROR,
        text="ZeroDivisionError: «division» by zero",
        duration=0.25,
        policy="sandbox",
        truncated=True,
    )
    failures = [{"tool": "run_code", "text": "ZeroDivisionError", "times": "2"}]
    tripped = BreakerTripped(
        step=1, tool="run_code", reason=HaltReason.TOOL_FAILURES, failures=failures
    )
    recorder(ToolCallStarted(step=1, call_id="c1", tool="run_code", arguments='{"code": "1/0"}'))
    recorder(failed)
    recorder(tripped)
    execution = ToolExecution.objects.get(run=run)
    assert (execution.step, execution.call_id, execution.tool) == (1, "c1", "run_code")
    assert execution.arguments == '{"code": "1/0"}'
    assert execution.status == "error"
    assert (execution.result, execution.error) == ("", failed.text)
    assert (execution.truncated, execution.duration, execution.policy) == (True, 0.25, "sandbox")
    assert execution.pruned_at is None
    assert execution.created_at == run.events.get(kind="tool_call_finished").created_at
    trip = BreakerTrip.objects.get(run=run)
    assert (trip.step, trip.tool, trip.reason) == (1, "run_code", "tool_failures")
    assert trip.failures == failures
    assert trip.created_at == run.events.get(kind="breaker_tripped").created_at
    assert run.events.get(kind="tool_call_finished").event == failed  # the log's JSON, whole


def record_steps(recorder: RunRecorder, steps: range) -> None:
    for step in steps:
        recorder(
            ModelReplied(step=step, text="", tool_calls=[], prompt_tokens=1, completion_tokens=1)
        )
        recorder(ToolCallStarted(step=step, call_id=f"c{step}", tool="t", arguments="{}"))
        recorder(finished_call(f"c{step}", step))


def prepared_appends() -> dict[str, str]:
    """The statements this session prepared that append to the event log, by name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%INSERT INTO "agent_runevent"%'],
        )
        return dict(cursor.fetchall())


def finished_call(call_id: str, step: int) -> ToolCallFinished:
    return ToolCallFinished(
        step=step,
        call_id=call_id,
        tool="t",
        arguments="{}",
        status=ToolStatus.OK,
        text="ok",
        duration=0.1,
    )


def test_a_run_worked_afresh_reads_nothing_it_knows_already(alice: Any) -> None:
    """A run claimed afresh has an empty log: its worker reads neither the log's rows nor its
    last seq; its owner comes with the claim and is read no more; and a run shorter than the
    summary's interval writes its figures once, with its end."""
    run = start_run(alice, "a task", model="mock")
    script = ScriptedLLM([call("list_files", {}), answer("ok")])
    with CaptureQueriesContext(connection) as queries:
        run = execute_run(run, llm=script)
    assert run.status == RunStatus.SUCCEEDED
    sent = [query["sql"] for query in queries.captured_queries]
    assert not [sql for sql in sent if 'MAX("agent_runevent"."seq")' in sql]
    assert not [
        sql for sql in sent if 'SELECT "agent_runevent"."kind", "agent_runevent"."data"' in sql
    ]
    assert not [sql for sql in sent if sql.startswith('SELECT "auth_user"')]
    assert not [sql for sql in sent if sql.startswith('UPDATE "agent_agentrun" SET "iterations"')]
    assert run.iterations == 2  # the end wrote them
