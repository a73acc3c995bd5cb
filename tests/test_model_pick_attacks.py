"""Attacks on the model pick and on the run engine's use of it: what a person (or a tampered
form) can make Loop run on, and what the operator's settings let through. Each test here failed
before its fix (docs/security.md, issue 19)."""

import threading
from html import unescape
from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agent.llm.factory import llm_for
from agent.llm.gate import TakingTurns
from agent.models import AgentRun, Conversation
from agent.runs import continue_run_as_operator, default_limits, new_conversation, start_run
from core.events import RunStatus
from core.interrupt import Interrupt, Interrupted, StopReason
from core.loop import Limits
from engine.execution import execute_run, server_gate
from tests.openai_server import MODEL, openai_server_fixture  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db

LLAMA = f"openai:{MODEL}"
HTMX = {"HX-Request": "true"}
DEMO = "Compute the sum of 1..100 and save it to a file"
# A vLLM server names its model by the path it was started with, unless --served-model-name
# says otherwise: a Hugging Face snapshot's path is easily longer than a run records.
SNAPSHOT = (
    "/srv/models/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/"
    "0e9e39f249a16976918f6564b8830bc894c89659e0e9e39f249a16976918f6564b8830bc8"
)


@pytest.fixture
def two_models(settings):
    """The mock (the default) and a model on an OpenAI-compatible server that is never asked."""
    settings.GROQ_API_KEY = ""
    settings.LOOP_MODEL = ""
    settings.LOOP_OPENAI_MODEL = ""
    settings.LOOP_OPENAI_API_KEY = ""
    settings.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LOOP_MODELS = ["mock", LLAMA]
    return settings


def halted_mock_run(user) -> AgentRun:
    """The demo on the mock, stopped at a cap of two model turns: it may be continued."""
    run = start_run(user, DEMO, model="mock", conversation=new_conversation(user), limits=Limits(2))
    run = execute_run(run)
    assert run.status == RunStatus.HALTED
    return run


# Continue of a run whose model the operator took away


def test_the_owner_cannot_continue_a_run_on_a_model_no_longer_offered(
    as_alice, alice, two_models, workspaces
):
    """Continue queues the run on the model it recorded: after the operator takes that model out
    of LOOP_MODELS, a person's Continue would still run on it. Refused, saying what to do."""
    run = halted_mock_run(alice)
    two_models.LOOP_MODELS = [LLAMA]  # the operator no longer offers the mock
    refused = as_alice.post(f"/runs/{run.pk}/continue/", headers=HTMX)
    assert refused.headers["HX-Retarget"] == "#send-error"
    text = unescape(refused.text)
    assert f"Run {run.pk} ran on the model 'mock', which this Loop no longer offers" in text
    assert "send the task again" in text
    plain = as_alice.post(f"/runs/{run.pk}/continue/")
    assert plain.status_code == 400
    assert "which this Loop no longer offers" in unescape(plain.text)
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED
    assert run.job_id is None
    # An operator still may: the console's Continue is theirs to decide.
    assert continue_run_as_operator(_operator(), run.pk).status == RunStatus.QUEUED


def test_a_run_on_a_model_no_longer_offered_shows_no_continue_button_but_why(
    as_alice, alice, two_models, workspaces
):
    run = halted_mock_run(alice)
    page = as_alice.get(f"/c/{run.conversation_id}/")
    assert f'action="/runs/{run.pk}/continue/"' in page.text
    two_models.LOOP_MODELS = [LLAMA]
    page = as_alice.get(f"/c/{run.conversation_id}/")
    assert f'action="/runs/{run.pk}/continue/"' not in page.text
    assert "It ran on mock, which this Loop no longer offers" in page.text


def test_the_owner_still_continues_a_run_on_a_model_offered(
    as_alice, alice, two_models, workspaces
):
    run = halted_mock_run(alice)
    continued = as_alice.post(f"/runs/{run.pk}/continue/", headers=HTMX)
    assert continued.status_code == 200
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def _operator():
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.com", "a long password")


# A model name longer than a run records


def test_a_model_name_too_long_to_record_is_refused_with_a_reason_not_a_500(alice, two_models):
    """An offered name longer than the run's `model` column failed the insert (DataError, a 500
    page, and a traceback from `runagent --model`). Refused before anything is stored."""
    long_name = f"openai:{SNAPSHOT}"
    two_models.LOOP_MODELS = ["mock", long_name]
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    refused = client.post("/send/", {"task": "hi", "model": long_name})
    assert refused.status_code == 400
    text = unescape(refused.text)
    assert f"is {len(SNAPSHOT)} characters long; Loop records model names of at most 128" in text
    assert "--served-model-name" in text
    assert not Conversation.objects.exists()
    assert not AgentRun.objects.exists()


def test_the_checks_name_a_model_too_long_to_record(two_models):
    two_models.LOOP_MODELS = ["mock", f"openai:{SNAPSHOT}"]
    two_models.LOOP_OPENAI_MODEL = SNAPSHOT
    found = [message.msg for message in run_checks(tags=["llm"]) if message.id == "agent.W004"]
    assert [msg.split(",")[0] for msg in found] == [
        f"LOOP_MODELS names 'openai:{SNAPSHOT}'",
        f"LOOP_OPENAI_MODEL names '{SNAPSHOT}'",
    ]
    assert "at most 128, so runs on it are refused" in found[0]


# A key sent in the clear


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.5:11434/v1", "http://models.example.com/v1", "http://user:pw@gpu-box:8000/v1"],
)
def test_check_deploy_warns_of_a_key_sent_over_plain_http(two_models, url):
    two_models.LOOP_OPENAI_BASE_URL = url
    two_models.LOOP_OPENAI_API_KEY = "sk-secret"
    found = {
        message.id: message for message in run_checks(tags=["llm"], include_deployment_checks=True)
    }
    warning = found["agent.W003"]
    assert "LOOP_OPENAI_API_KEY" in warning.msg
    assert "plain http" in warning.msg
    assert "pw" not in warning.msg  # the URL as messages show it, without its password
    assert "sk-secret" not in warning.msg
    assert "https://" in warning.hint


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://127.0.0.1:11434/v1", "sk-secret"),
        ("http://localhost:11434/v1", "sk-secret"),
        ("http://[::1]:8080/v1", "sk-secret"),
        ("https://openrouter.ai/api/v1", "sk-secret"),
        ("http://10.0.0.5:11434/v1", ""),  # no key: nothing to give away
    ],
)
def test_check_deploy_is_quiet_about_a_key_that_stays_on_this_machine_or_goes_over_tls(
    two_models, url, key
):
    two_models.LOOP_OPENAI_BASE_URL = url
    two_models.LOOP_OPENAI_API_KEY = key
    found = [message.id for message in run_checks(tags=["llm"], include_deployment_checks=True)]
    assert "agent.W003" not in found


def test_check_deploy_warns_of_a_groq_key_sent_over_plain_http(two_models):
    two_models.GROQ_API_KEY = "gsk_secret"
    two_models.GROQ_BASE_URL = "http://groq-proxy.internal"
    found = {
        message.id: message for message in run_checks(tags=["llm"], include_deployment_checks=True)
    }
    assert "GROQ_API_KEY" in found["agent.W003"].msg


# Many runs on one slow model server


@pytest.fixture
def one_slot(two_models, openai_server):
    """The fake server, asked by this worker at most one request at a time."""
    two_models.LOOP_OPENAI_BASE_URL = openai_server.base_url
    two_models.LOOP_OPENAI_CONCURRENCY = 1
    two_models.LOOP_OPENAI_MAX_RETRIES = 0
    return openai_server


@pytest.mark.serial
def test_a_run_waits_its_turn_for_a_busy_model_server_and_halts_on_its_deadline(
    alice, one_slot, workspaces
):
    """Every run of a worker asked a server that answers one request at a time at once: the
    queued ones timed out at the server, were asked again at its back, and it worked out replies
    nobody read. With LOOP_OPENAI_CONCURRENCY a run waits for a free slot instead, and one that
    gets none in its time halts on its deadline, without asking."""
    gate = server_gate()
    assert gate is not None
    assert gate.acquire(blocking=False)  # another run's request is at the server
    try:
        waiting = start_run(alice, "hi", model=LLAMA, limits=default_limits(max_seconds=1))
        waiting = execute_run(waiting)
    finally:
        gate.release()
    assert waiting.status == RunStatus.HALTED, waiting.error
    assert waiting.halt_reason == "deadline"
    assert "LOOP_OPENAI_CONCURRENCY" in waiting.answer + waiting.error
    assert not [r for r in one_slot.requests if r.path.endswith("/chat/completions")]
    one_slot.reply("Hello.")
    asked = execute_run(start_run(alice, "hi", model=LLAMA))
    assert (asked.status, asked.answer) == (RunStatus.SUCCEEDED, "Hello.")
    assert gate.acquire(blocking=False)  # the slot is free again
    gate.release()


def test_a_run_stopped_while_it_waits_its_turn_never_asks_the_server(one_slot):
    """A Stop ends the wait for a slot at once, and the request is never sent: a run stopped
    behind a busy server does not add to its queue when its turn comes."""
    gate = server_gate()
    assert gate is not None
    client, interrupt = TakingTurns(llm_for(LLAMA), gate), Interrupt()
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            client.chat(
                [{"role": "user", "content": "hi"}], None, timeout=None, interrupt=interrupt
            )
        except BaseException as error:  # handed to the test
            outcome.append(error)

    assert gate.acquire(blocking=False)  # another run's request is at the server
    asker = threading.Thread(target=ask, daemon=True)
    try:
        asker.start()
        interrupt.set(StopReason.CANCEL)
        asker.join(timeout=30)  # a bound that only turns a hang into a failure
    finally:
        gate.release()
    assert not asker.is_alive()
    assert [type(error) for error in outcome] == [Interrupted]
    assert not one_slot.requests
    assert gate.acquire(blocking=False)  # it left the slot free
    gate.release()


def test_runagent_refuses_a_model_name_too_long_to_record(alice, two_models):
    with pytest.raises(CommandError, match="Loop records model names of at most 128"):
        call_command("runagent", "hi", "--model", f"openai:{SNAPSHOT}", stdout=StringIO())
    assert not AgentRun.objects.exists()
