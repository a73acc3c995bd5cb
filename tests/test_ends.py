"""Ends a person understands (issue 28): one banner per end saying what happened and what to do;
a halted or stopped run's answer tells its progress in words while the tools' output stays in the
cards; the breaker lists each distinct error once, and a Continue that fails the same way halts at
once and says so; a snippet killed by Stop shows as stopped; a stopped run can be continued; the
worker loads what a first run needs before it takes runs."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, call
from agent.models import AgentRun
from agent.runs import cancel_run, new_conversation, start_run, submit_run
from agent.selectors import history_of
from chat.rendering import BREAKER_STEP, STOPPED_TEXT, end_banner
from core.events import HaltReason, RunFinished, RunStatus
from core.guards import Breaker
from core.llm import ToolCall
from core.progress import Outcome, failure_reason, progress_in_words
from core.results import ToolResult, ToolStatus
from engine.execution import execute_run
from tests.conftest import OutputLines, wait_for
from tests.groq_server import groq_server_fixture, tool_call  # noqa: F401 (the fixture)

KEEP_READING = "Keep reading missing.txt until it exists"
MISSING = "missing.txt does not exist in your workspace."
HTMX = {"HX-Request": "true"}
END_BANNER = 'class="end-banner'
GROQ_MODEL = "openai/gpt-oss-120b"


def page_of(user, run: AgentRun) -> str:
    client = Client()
    client.force_login(user)
    return client.get(reverse("chat:conversation", args=[run.conversation_id])).text


def mock_run(user, task: str = KEEP_READING) -> AgentRun:
    return start_run(user, task, model="mock", conversation=new_conversation(user))


def continued(user, run: AgentRun) -> AgentRun:
    """The owner's Continue from the chat, then the run worked here to its next end."""
    client = Client()
    client.force_login(user)
    response = client.post(reverse("chat:continue", args=[run.pk]), headers=HTMX)
    assert response.status_code == 200
    return execute_run(AgentRun.objects.get(pk=run.pk))


@pytest.mark.django_db
def test_a_breaker_halt_shows_one_banner_saying_what_happened_and_what_to_do(alice, workspaces):
    run = execute_run(mock_run(alice))
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, HaltReason.TOOL_FAILURES)
    page = page_of(alice, run)
    assert page.count(END_BANNER) == 1
    assert "Circuit breaker" not in page  # no card of its own for the trip, nor for the halt
    assert 'class="card banner' not in page
    assert f"Halted: read_file failed 3 times in a row: {MISSING}" in page
    # Before the Continue: going on unchanged would trip it again at once, and the banner says so.
    assert BREAKER_STEP in page
    assert 'class="continue"' in page


@pytest.mark.django_db
def test_the_breaker_lists_each_distinct_error_once_with_how_many_times(alice, workspaces):
    run = execute_run(mock_run(alice))
    [trip] = run.breaker_trips.all()
    [failure] = trip.failures  # three calls, one error
    assert failure["times"] == "3"
    assert failure["error"].startswith(MISSING)
    assert json.loads(failure["arguments"]) == {"path": "missing.txt"}


@pytest.mark.django_db
def test_a_continue_that_fails_the_same_way_halts_at_once_and_says_so(alice, workspaces):
    run = continued(alice, execute_run(mock_run(alice)))
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, HaltReason.REPEATED_FAILED_CALL)
    kinds = list(run.events.order_by("seq").values_list("kind", flat=True))
    after_continue = kinds[kinds.index("run_resumed") :]
    assert after_continue.count("tool_call_finished") == 1  # not three more tries
    first, again = run.breaker_trips.order_by("pk")
    assert len(first.failures) == len(again.failures) == 1  # the list does not grow
    assert again.failures[0]["times"] == "1"
    page = page_of(alice, run)
    assert "Halted: read_file failed again after the Continue, the same way as before it" in page
    # The model was told, with the Continue, which failure had halted the run.
    notes = [m["content"] for m in history_of(run) if m["role"] == "user"]
    assert any("It had halted because read_file failed 3 times in a row" in n for n in notes)


def test_after_a_continue_a_call_that_works_lets_a_failure_count_afresh():
    read = ToolCall("c1", "read_file", '{"path": "missing.txt"}')
    failed = ToolResult(ToolStatus.ERROR, MISSING, 0.0)
    breaker = Breaker(max_failures=3, max_identical=3)
    breaker.remember_trip("read_file", [{"arguments": read.arguments, "error": MISSING}])
    assert breaker.after(read, failed) is not None  # the same failure again: at once

    breaker = Breaker(max_failures=3, max_identical=3)
    breaker.remember_trip("read_file", [{"arguments": read.arguments, "error": MISSING}])
    breaker.after(ToolCall("c2", "write_file", "{}"), ToolResult(ToolStatus.OK, "written", 0.0))
    assert breaker.after(read, failed) is None  # something changed: it counts from one again


@pytest.mark.django_db
def test_a_halted_run_s_answer_tells_its_progress_in_words_and_the_cards_keep_the_output(
    alice, workspaces
):
    failing = [call("run_code", {"code": f"print({n})\n1 / 0"}) for n in range(3)]
    script = [call("run_code", {"code": "print('fine')"}), *failing]  # no summary turn: Loop's
    run = execute_run(mock_run(alice, "Divide"), llm=ScriptedLLM(script))
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, HaltReason.TOOL_FAILURES)
    assert "What worked: run_code." in run.answer
    assert "What failed: run_code, 3 times — ZeroDivisionError: division by zero" in run.answer
    assert "--- stdout ---" not in run.answer
    assert "(empty)" not in run.answer
    page = page_of(alice, run)
    assert page.count("--- stdout ---") == 4  # each call's card has its whole output
    assert page.count(END_BANNER) == 1


def test_a_failure_s_reason_is_its_one_line_not_its_report():
    report = "exit status: 1\n--- stdout ---\n5050\n--- stderr ---\nTraceback\nValueError: bad"
    assert failure_reason(ToolStatus.ERROR, report) == "ValueError: bad."
    killed = "Killed after 5 seconds (timeout).\nexit status: killed\n--- stdout ---\n(empty)\n"
    killed += "--- stderr ---\n(empty)"
    assert failure_reason(ToolStatus.TIMEOUT, killed) == "Killed after 5 seconds (timeout)."
    lines = progress_in_words(
        [
            Outcome("run_code", ToolStatus.ERROR, "stopped: the run was stopped", stopped=True),
            Outcome("write_file", ToolStatus.SKIPPED, "not run: the run was cancelled"),
        ]
    )
    assert lines == [
        "Stopped while running: run_code.",
        "Not finished: write_file (the run ended first).",
    ]


# A real worker: a Stop reaches the snippet it runs, and a Continue is worked by it.


@pytest.fixture
def worker_on_groq(settings, groq_server, start_worker) -> None:
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = GROQ_MODEL
    start_worker(
        GROQ_API_KEY="gsk_test_key",
        GROQ_BASE_URL=groq_server.base_url,
        LOOP_GROQ_MODEL=GROQ_MODEL,
    )


def finished(run: AgentRun) -> AgentRun:
    wait_for(lambda: AgentRun.objects.get(pk=run.pk).is_finished, "the run to end")
    run.refresh_from_db()
    return run


@pytest.mark.django_db(transaction=True)
def test_a_snippet_killed_by_stop_shows_stopped_and_the_stopped_run_continues(
    alice,
    groq_server,
    worker_on_groq,
    workspaces,
):
    snippet = {"code": "import time\ntime.sleep(30)\n", "timeout": 60}
    groq_server.reply(tool_calls=[tool_call("run_code", snippet, id="call_long")])
    run = submit_run(alice, "Run the long snippet", new_conversation(alice))
    wait_for(lambda: run.events.filter(kind="tool_call_started").exists(), "the snippet")
    cancel_run(alice, run.pk)
    run = finished(run)
    assert run.status == RunStatus.CANCELLED
    [ended] = run.events.filter(kind="tool_call_finished")
    assert (ended.data["status"], ended.data["stopped"]) == ("error", True)

    page = page_of(alice, run)
    assert 'class="card tool status-stopped"' in page
    assert '<span class="status-text">Stopped</span>' in page
    assert "status-error" not in page
    assert page.count(END_BANNER) == 1
    assert STOPPED_TEXT in page
    assert 'class="continue"' in page  # a stopped run can be continued

    groq_server.reply("Carried on after the Stop.")
    client = Client()
    client.force_login(alice)
    response = client.post(reverse("chat:continue", args=[run.pk]), headers=HTMX)
    assert response.status_code == 200
    run = finished(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run.answer == "Carried on after the Stop."
    assert run.events.filter(kind="run_resumed", data__reason="continued").exists()


@pytest.mark.django_db(transaction=True)
def test_the_worker_warms_up_before_it_takes_runs(start_worker):
    lines = OutputLines(start_worker())
    wait_for(lambda: lines.count("working up to"), "the worker to take runs")
    text = "".join(lines.lines)
    assert "warmed up (the embedder, the tools' specs, the run's modules)" in text
    assert text.index("warmed up") < text.index("working up to")


def test_an_end_logged_before_ends_carried_their_why_still_says_what_happened():
    old = RunFinished(status=RunStatus.HALTED, answer="", halt_reason=HaltReason.DEADLINE)
    assert end_banner(old)["what"] == "Halted: it ran out of time."
    bare = RunFinished(status=RunStatus.HALTED, answer="")
    assert end_banner(bare)["what"] == "Halted."
    # Its error is an operator's detail (the console shows it); without a cause, no words for it.
    failed = RunFinished(status=RunStatus.FAILED, answer="", error="Model failed: 503")
    assert (end_banner(failed)["what"], end_banner(failed)["tone"]) == ("Failed.", "bad")
    assert end_banner(RunFinished(status=RunStatus.SUCCEEDED, answer="391")) is None
