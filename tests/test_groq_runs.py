"""A whole run on a Groq model: the same loop, the real groq client, a fake Groq server."""

import pytest
from django.contrib.auth.models import User

from agent.events import RunStatus
from agent.services import default_limits, execute_run, start_run
from tests.groq_server import groq_server_fixture, tool_call  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db

MODEL = "llama-3.3-70b-versatile"


@pytest.fixture
def on_groq(settings, groq_server):
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MAX_RETRIES = 1
    return groq_server


def test_a_run_on_groq_calls_tools_and_feeds_their_results_back(on_groq, workspaces):
    alice = User.objects.create_user("alice")
    on_groq.reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "hi"})])
    on_groq.reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})])
    on_groq.reply("a.txt says hi.", usage=(50, 5))
    run = execute_run(start_run(alice, "Write hi to a.txt and read it back"))
    assert (run.provider, run.model, run.status) == ("groq", MODEL, RunStatus.SUCCEEDED)
    assert run.answer == "a.txt says hi."
    assert list(run.tool_executions.values_list("tool", "status")) == [
        ("write_file", "ok"),
        ("read_file", "ok"),
    ]
    last = on_groq.requests[-1]
    assert last.body["model"] == MODEL
    assert last.messages[-1]["role"] == "tool"
    assert last.messages[-1]["content"] == "hi"
    assert (workspaces / str(alice.pk) / "a.txt").read_text() == "hi"


def test_a_provider_that_keeps_failing_ends_the_run_failed_with_its_progress(on_groq, workspaces):
    alice = User.objects.create_user("alice")
    on_groq.reply(tool_calls=[tool_call("list_files", {})])
    on_groq.fail(500, "internal error", headers={"retry-after-ms": "10"}, times=2)
    run = execute_run(start_run(alice, "List my files"))
    assert run.status == RunStatus.FAILED
    assert run.error == "Model failed: Groq answered 500: internal error"
    assert "list_files -> ok" in run.answer
    assert len(on_groq.requests) == 3  # one turn, then the failing one and its one retry


def test_a_slow_provider_is_cut_off_at_the_runs_deadline(on_groq, workspaces):
    alice = User.objects.create_user("alice")
    on_groq.reply("too late", delay=5)
    run = start_run(alice, "List my files", limits=default_limits(max_seconds=1))
    run = execute_run(run)
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "deadline")
    assert len(on_groq.requests) == 1  # no retry past the deadline
