"""Operator language never reaches a person: every page a person sees, with a run the model
server failed, a run the demo model could not do and a call the person declined, holds no
setting name, command or internal address, while the console still shows an operator the detail.
Runs are worked here, with a real sandbox and a real chat-completions client against a port
nothing listens on (engine.execution, as tests/test_engine.py)."""

import re

import pytest
from django.test import Client

from agent.llm.openai_compat import OpenAICompatibleLLM
from agent.llm.scripted import answer, call
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from core.events import EndCause, RunStatus
from engine.execution import execute_run
from tests.socket_harness import free_port
from tests.test_approval_cards import asks, decide, decision, parked, worked  # noqa: F401

pytestmark = pytest.mark.django_db

# What only an operator acts on: settings, commands, the site's own addresses.
OPERATOR_WORDS = re.compile(
    r"LOOP_[A-Z_]+|GROQ_[A-Z_]+|DATABASE_URL|EMAIL_[A-Z_]+|DJANGO_[A-Z_]+|manage\.py|"
    r"\bmake (?:run|test|lint|upgrade)\b|modelcheck|groqcheck|127\.0\.0\.1|localhost:\d+|"
    r"<<<|treat it as data|by the person|DENIED:"
)


@pytest.fixture
def person(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def run_of(user, task: str, **worked_with) -> AgentRun:
    run = start_run(user, task, model="mock", conversation=new_conversation(user, task))
    return execute_run(run, **worked_with)


@pytest.fixture
def model_down(alice, workspaces) -> AgentRun:
    """A run whose model server is not there: its error names the address, the setting and the
    command an operator checks it with."""
    address = f"http://127.0.0.1:{free_port()}/v1"
    server = OpenAICompatibleLLM("llama", base_url=address, max_retries=0)
    run = run_of(alice, "What is 17 * 23?", llm=server)
    assert (run.status, run.cause) == (RunStatus.FAILED, EndCause.MODEL_DOWN)
    assert "LOOP_OPENAI_BASE_URL" in run.error
    assert "manage.py modelcheck" in run.error
    assert "127.0.0.1" in run.error
    return run


@pytest.fixture
def only_help(alice, workspaces) -> AgentRun:
    return run_of(alice, "Write a poem about the sea")


@pytest.fixture
def declined(asks, alice, person) -> AgentRun:  # noqa: F811 (asks, a fixture)
    run = parked(alice, call("run_code", {"code": "print(6 * 7)"}), answer("unused"))
    assert decide(person, run, decision(run, "deny", reason="not now")).status_code == 200
    run = worked(run, answer("I will not run it, then."))
    assert run.status == RunStatus.SUCCEEDED
    return run


def person_pages(person: Client, *runs: AgentRun) -> dict[str, str]:
    """Every page a person sees, by its path, with the runs' conversations and turns."""
    paths = [
        "/",
        "/files/",
        "/memories/",
        "/settings/approvals/",
        "/settings/tools/",
        "/accounts/password/",
        "/accounts/data/",
        "/waiting/",
        "/search/?q=poem",
    ]
    for run in runs:
        paths += [f"/c/{run.conversation_id}/", f"/runs/{run.pk}/"]
    pages = {}
    for path in paths:
        response = person.get(path)
        assert response.status_code == 200, path
        pages[path] = response.content.decode()
    return pages


def operator_words(pages: dict[str, str]) -> dict[str, list[str]]:
    return {path: found for path, page in pages.items() if (found := OPERATOR_WORDS.findall(page))}


def test_no_page_a_person_sees_names_a_setting_a_command_or_an_address(
    model_down, only_help, declined, person
):
    pages = person_pages(person, model_down, only_help, declined)
    assert operator_words(pages) == {}
    failed = pages[f"/c/{model_down.conversation_id}/"]
    assert "The assistant&#x27;s model is not answering." in failed
    assert "Try again in a few minutes" in failed
    assert "Your progress is kept." in failed
    helped = pages[f"/c/{only_help.conversation_id}/"]
    assert "This site runs a demo model" in helped
    assert "Not done: this site&#x27;s demo model cannot do this task." in helped
    assert '<span class="status-text">Done</span>' not in helped  # not a success's tick
    said_no = pages[f"/c/{declined.conversation_id}/"]
    assert "You declined this call" in said_no
    assert "Reason: not now" in said_no


def test_the_console_still_shows_an_operator_the_detail(model_down, only_help, client, operator):
    failed = client.get(f"/admin/agent/agentrun/{model_down.pk}/change/").content.decode()
    assert "LOOP_OPENAI_BASE_URL" in failed
    assert "manage.py modelcheck" in failed
    assert "127.0.0.1" in failed
    helped = client.get(f"/admin/agent/agentrun/{only_help.pk}/change/").content.decode()
    assert "This site runs a demo model" in helped


def test_the_demo_models_help_is_not_ended_as_a_success(only_help, person):
    """Its run ends as it should (nothing failed), its cause saying it did nothing of the task."""
    assert (only_help.status, only_help.cause) == (RunStatus.SUCCEEDED, EndCause.ONLY_HELP)
    page = person.get(f"/c/{only_help.conversation_id}/").content.decode()
    [header] = re.findall(
        r'<article class="card answer[^"]*"[^>]*>\s*<header>.*?</header>', page, re.S
    )
    assert "status-not-done" in header
    assert "Not done" in header
    assert "✓" not in header
    # Nor does the sidebar's icon of its conversation say it is done.
    [item] = re.findall(rf'<a href="/c/{only_help.conversation_id}/"[^>]*>.*?</a>', page, re.S)
    assert "Not done" in item
    assert "✓" not in item


def test_the_search_finds_what_it_is_meant_to():
    """Not vacuous: the words it looks for are found where they are."""
    assert OPERATOR_WORDS.search("set LOOP_OPENAI_BASE_URL, then `manage.py modelcheck`")
    assert OPERATOR_WORDS.search("the model server at http://127.0.0.1:8080/v1")
    assert OPERATOR_WORDS.search("DENIED: by the person: not now")
    assert not OPERATOR_WORDS.search("Make your task smaller; make it plain.")
