"""Stop, from this process, reaching a run a real `manage.py worker` is in the middle of: a model
turn the provider takes 30 s over, a 30 s rate-limit wait, and a 30 s snippet. Each ends
`cancelled` with a valid transcript long before the step would have ended on its own.

The provider is the fake Groq server (the network edge); the worker, its database, NOTIFY and the
sandbox are real. The bound checked is the step's own length: a Stop that only took effect at the
step's end would take 30 s.
"""

import time

import pytest

from agent.models import AgentRun
from agent.runs import cancel_run, new_conversation, submit_run
from agent.selectors import history_of
from core.events import RunStatus
from tests.conftest import wait_for
from tests.groq_server import groq_server_fixture, tool_call  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai/gpt-oss-120b"
STEP_SECONDS = 30
# Far below the step's length; generous for a loaded machine (Stop is meant to take under 1 s).
STOPPED_WITHIN = 15


@pytest.fixture
def worker_on_groq(settings, groq_server, start_worker) -> None:
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = MODEL
    start_worker(
        GROQ_API_KEY="gsk_test_key",
        GROQ_BASE_URL=groq_server.base_url,
        LOOP_GROQ_MODEL=MODEL,
        LOOP_GROQ_MAX_RETRIES="2",
    )


def stop_when(user, run: AgentRun, ready: str, condition) -> float:
    """Stop the run once `condition()` holds; the seconds until it ended cancelled."""
    wait_for(condition, ready)
    asked = time.monotonic()
    cancel_run(user, run.pk)
    wait_for(lambda: AgentRun.objects.get(pk=run.pk).is_finished, "the run to end")
    run.refresh_from_db()
    return time.monotonic() - asked


def assert_cancelled_with_a_valid_transcript(run: AgentRun) -> None:
    assert run.status == RunStatus.CANCELLED, run.error
    assert run.events.last().kind == "run_finished"
    seqs = list(run.events.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    answered = {m["tool_call_id"] for m in history_of(run) if m["role"] == "tool"}
    asked = {
        c["id"]
        for m in history_of(run)
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
    }
    assert asked == answered  # every call the model asked for has its one result


def test_stop_during_a_model_turn(alice, groq_server, worker_on_groq):
    groq_server.reply("far too late", delay=STEP_SECONDS)
    run = submit_run(alice, "Think hard", new_conversation(alice))
    took = stop_when(alice, run, "the model turn", lambda: groq_server.requests)
    assert_cancelled_with_a_valid_transcript(run)
    assert took < STOPPED_WITHIN
    assert not run.events.filter(kind="model_replied").exists()


def test_stop_during_a_rate_limit_wait(alice, groq_server, worker_on_groq):
    groq_server.rate_limited(retry_after=STEP_SECONDS)
    groq_server.reply("after the wait")
    run = submit_run(alice, "Think hard", new_conversation(alice))
    took = stop_when(alice, run, "the rate limit", lambda: groq_server.requests)
    assert_cancelled_with_a_valid_transcript(run)
    assert took < STOPPED_WITHIN
    assert len(groq_server.requests) == 1  # it did not ask again after the stop


def test_stop_during_a_tool_call(alice, groq_server, worker_on_groq, workspaces):
    snippet = {"code": f"import time\ntime.sleep({STEP_SECONDS})\n", "timeout": 60}
    groq_server.reply(tool_calls=[tool_call("run_code", snippet, id="call_long")])
    groq_server.reply("never asked")
    run = submit_run(alice, "Run the long snippet", new_conversation(alice))
    took = stop_when(
        alice,
        run,
        "the snippet",
        lambda: run.events.filter(kind="tool_call_started").exists(),
    )
    assert_cancelled_with_a_valid_transcript(run)
    assert took < STOPPED_WITHIN
    [execution] = run.tool_executions.all()
    assert "stopped" in execution.error
