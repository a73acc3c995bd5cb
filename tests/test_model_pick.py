"""The model in the chat: the header names the model a conversation's next task runs on and its
provider; with several offered (LOOP_MODELS) a person picks one, for a new conversation or for
any later message; the conversation keeps the pick and each run records the provider and model
it used. A name the page does not offer is refused and stores nothing; another person's
conversation is out of reach."""

import ast
import importlib
import re
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.apps import apps
from django.db import connection
from django.test import Client
from procrastinate.contrib.django.models import ProcrastinateJob

from agent import models as agent_models
from agent.llm import factory
from agent.models import AgentRun, Conversation
from agent.queue import WORK_RUN
from agent.runs import new_conversation, start_run
from core.events import RunStatus
from engine.execution import execute_run
from tests.openai_server import MODEL, openai_server_fixture  # noqa: F401 (the fixture)
from tests.test_chat_views import ActiveParts

pytestmark = pytest.mark.django_db

LLAMA = f"openai:{MODEL}"  # the fake server's model, qualified
QWEN = "openai:qwen3:8b"  # on the same server, but not offered
TASK = "What is 17 * 23?"
HTMX = {"HX-Request": "true"}
MOVE_TO_MODEL_NAMES = importlib.import_module("agent.migrations.0007_conversation_model")


@pytest.fixture
def two_models(nothing_configured):
    """The mock and a model on an OpenAI-compatible server, the mock the default. The server is
    never asked here (no run is worked), so its address need not answer."""
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    nothing_configured.LOOP_MODELS = ["mock", LLAMA]
    return nothing_configured


class ModelHeader(HTMLParser):
    """The text of the header's model (the element with id conversation-model), and its pick's
    options as (value, selected)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.depth = 0
        self.found = 0
        self.words: list[str] = []
        self.options: list[tuple[str, bool]] = []
        self.feed(page)
        assert self.found == 1, page

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id") == "conversation-model":
            self.found += 1
            self.depth = 1
        elif self.depth and tag not in VOID:
            self.depth += 1
        if self.depth and tag == "option":
            self.options.append((values["value"] or "", "selected" in values))

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.words.extend(data.split())


VOID = {"input", "br", "img"}


def header_text(page: str) -> str:
    return " ".join(ModelHeader(page).words)


def options(page: str) -> list[tuple[str, bool]]:
    """The models the header's pick offers: (value, selected); none without a pick."""
    return ModelHeader(page).options


def test_the_header_names_the_mock_and_leaves_the_operators_note_to_the_console(
    as_alice, nothing_configured
):
    page = as_alice.get("/").text
    text = header_text(page)
    assert text == "model: mock · built in (a mock)"  # the operators' note is in the console
    assert options(page) == []


def test_the_header_names_the_configured_model_and_its_provider(as_alice, nothing_configured):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://user:secret@10.1.2.3:11434/v1"
    nothing_configured.LOOP_OPENAI_MODEL = MODEL
    page = as_alice.get("/").text
    assert header_text(page) == f"model: {MODEL} · OpenAI-compatible server"
    assert "10.1.2.3" not in page  # the server's address stays the operator's
    assert "secret" not in page
    nothing_configured.GROQ_API_KEY = "gsk_test"
    nothing_configured.LOOP_OPENAI_BASE_URL = ""
    nothing_configured.LOOP_GROQ_MODEL = "openai/gpt-oss-120b"
    assert header_text(as_alice.get("/").text) == "model: openai/gpt-oss-120b · Groq"


def test_one_model_offers_no_pick_and_its_runs_use_it(as_alice, alice, nothing_configured):
    nothing_configured.LOOP_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    nothing_configured.LOOP_OPENAI_MODEL = MODEL
    page = as_alice.get("/").text
    assert 'id="model-pick"' not in page
    assert "data-model-pick" not in page  # the suggestions carry no pick either
    as_alice.post("/send/", {"task": TASK})
    run = AgentRun.objects.get()
    assert (run.provider, run.model) == ("openai", MODEL)
    assert Conversation.objects.get().model == LLAMA
    assert header_text(as_alice.get(f"/c/{run.conversation_id}/").text).startswith(
        f"model: {MODEL} · OpenAI-compatible server"
    )


def test_several_models_are_offered_the_default_picked(as_alice, two_models):
    page = as_alice.get("/").text
    assert options(page) == [("mock", True), (LLAMA, False)]
    assert "mock · built in" in header_text(page)
    assert f"{MODEL} · OpenAI-compatible server" in header_text(page)
    assert "LOOP_OPENAI_BASE_URL" not in header_text(page)  # the operator chose the mock too
    # The suggestions start the conversation on the pick too (chat/static/chat/models.js).
    assert '<input type="hidden" name="model" value="mock" data-model-pick>' in page
    assert "chat/models.js" in page
    assert ActiveParts(page).found == []  # the CSP holds: no inline script


def test_the_default_is_picked_when_loop_model_names_one_that_can_run(as_alice, two_models):
    two_models.LOOP_MODEL = MODEL  # bare: the server's model, offered first
    assert options(as_alice.get("/").text) == [(LLAMA, True), ("mock", False)]
    two_models.LOOP_MODEL = "groq:not-here"  # cannot run here (no key): the first of LOOP_MODELS
    assert options(as_alice.get("/").text) == [("mock", True), (LLAMA, False)]


def worked() -> None:
    """Every run queued so far has ended, as a worker would have seen to: the next task sent in
    their conversation starts a run rather than waiting its turn."""
    AgentRun.objects.filter(status=RunStatus.QUEUED).update(status=RunStatus.SUCCEEDED)


def test_a_pick_is_stored_with_the_conversation_and_recorded_by_its_run(
    as_alice, alice, two_models
):
    response = as_alice.post("/send/", {"task": TASK, "model": LLAMA})
    conversation = Conversation.objects.get(owner=alice)
    assert response.url == f"/c/{conversation.pk}/"
    assert conversation.model == LLAMA
    run = AgentRun.objects.get()
    assert (run.provider, run.model, run.conversation_id) == ("openai", MODEL, conversation.pk)
    page = as_alice.get(response.url).text
    assert options(page) == [("mock", False), (LLAMA, True)]


def test_the_next_message_keeps_the_conversation_s_model_unless_another_is_picked(
    as_alice, alice, two_models
):
    two_models.LOOP_USER_ACTIVE_RUNS = 4
    as_alice.post("/send/", {"task": TASK, "model": LLAMA})
    conversation = Conversation.objects.get()
    send = f"/c/{conversation.pk}/send/"
    worked()
    as_alice.post(send, {"task": "And 18 * 23?"}, headers=HTMX)  # a form with no pick
    worked()
    as_alice.post(send, {"task": "Now 19 * 23?", "model": "mock"}, headers=HTMX)
    worked()
    switched = as_alice.post(send, {"task": "Then 20 * 23?"}, headers=HTMX)
    used = list(AgentRun.objects.order_by("pk").values_list("provider", "model"))
    assert used == [("openai", MODEL), ("openai", MODEL), ("mock", "mock"), ("mock", "mock")]
    conversation.refresh_from_db()
    assert conversation.model == "mock"
    # The header, drawn again out of band, picks what the conversation goes on with.
    assert 'id="conversation-model" hx-swap-oob="true"' in switched.text
    assert options(switched.text) == [("mock", True), (LLAMA, False)]
    # Each task says which model it went to, as the conversation can change models.
    page = as_alice.get(f"/c/{conversation.pk}/").text
    assert re.findall(r'class="on-model"[^>]*>· to ([^<]+)<', page) == [
        MODEL,
        MODEL,
        "mock",
        "mock",
    ]


def test_a_refused_task_keeps_the_person_s_pick(as_alice, two_models):
    refused = as_alice.post("/send/", {"task": "   ", "model": LLAMA})
    assert refused.status_code == 400
    assert options(refused.text) == [("mock", False), (LLAMA, True)]
    assert not AgentRun.objects.exists()


def test_a_name_not_offered_is_refused_and_nothing_is_stored(as_alice, alice, two_models):
    # Procrastinate's tables are not flushed between tests: jobs an earlier transactional test
    # deferred may lie in the queue. None is added here.
    jobs = ProcrastinateJob.objects.filter(task_name=WORK_RUN)
    queued_before = set(jobs.values_list("pk", flat=True))
    for tampered in (QWEN, "groq:openai/gpt-oss-120b", "openai:", "x" * 5000, "mock "):
        refused = as_alice.post("/send/", {"task": TASK, "model": tampered})
        assert refused.status_code == 400, tampered
        assert "This Loop does not offer the model" in refused.text
        assert "Pick one of the models it offers (mock, openai:llama3.1:8b)" in refused.text
    assert not Conversation.objects.exists()
    assert not AgentRun.objects.exists()
    assert set(jobs.values_list("pk", flat=True)) == queued_before


def test_a_name_not_offered_is_refused_in_a_conversation_which_keeps_its_model(
    as_alice, alice, two_models
):
    conversation = start_run(
        alice, TASK, model=LLAMA, conversation=new_conversation(alice)
    ).conversation
    conversation.refresh_from_db()
    refused = as_alice.post(
        f"/c/{conversation.pk}/send/", {"task": "More", "model": QWEN}, headers=HTMX
    )
    assert refused.headers["HX-Retarget"] == "#send-error"
    assert "This Loop does not offer the model 'openai:qwen3:8b'" in unescape(refused.text)
    marked = as_alice.post(
        f"/c/{conversation.pk}/send/", {"task": "More", "model": "<b>x</b>"}, headers=HTMX
    )
    assert "&lt;b&gt;x&lt;/b&gt;" in marked.text  # shown as text, never as markup
    plain = as_alice.post(f"/c/{conversation.pk}/send/", {"task": "More", "model": QWEN})
    assert plain.status_code == 400
    assert "This Loop does not offer the model" in plain.text
    assert AgentRun.objects.count() == 1
    conversation.refresh_from_db()
    assert conversation.model == LLAMA


def test_the_mock_is_refused_when_the_operator_does_not_offer_it(as_alice, two_models):
    two_models.LOOP_MODELS = [LLAMA, QWEN]
    refused = as_alice.post("/send/", {"task": TASK, "model": "mock"})
    assert refused.status_code == 400
    assert "This Loop does not offer the model 'mock'" in unescape(refused.text)
    assert not AgentRun.objects.exists()


def test_another_person_can_neither_see_nor_change_a_conversation_s_model(
    client, alice, bob, two_models
):
    run = start_run(alice, TASK, model=LLAMA, conversation=new_conversation(alice))
    conversation = run.conversation
    client.force_login(bob)
    assert client.get(f"/c/{conversation.pk}/").status_code == 404
    for headers in ({}, HTMX):
        sent = client.post(
            f"/c/{conversation.pk}/send/", {"task": "mine", "model": "mock"}, headers=headers
        )
        assert sent.status_code == 404
    conversation.refresh_from_db()
    assert conversation.model == LLAMA
    assert AgentRun.objects.count() == 1
    # Bob's own new conversation starts on the default, whatever Alice picked.
    assert options(client.get("/").text) == [("mock", True), (LLAMA, False)]


def test_a_pick_without_the_csrf_token_is_refused(alice, two_models):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/send/", {"task": TASK, "model": LLAMA}).status_code == 403
    conversation = new_conversation(alice)
    sent = client.post(f"/c/{conversation.pk}/send/", {"task": TASK, "model": LLAMA}, headers=HTMX)
    assert sent.status_code == 403
    conversation.refresh_from_db()
    assert conversation.model == ""
    assert not AgentRun.objects.exists()


def test_a_conversation_whose_model_is_no_longer_offered_goes_on_with_the_default(
    as_alice, alice, two_models
):
    conversation = start_run(
        alice, TASK, model=LLAMA, conversation=new_conversation(alice)
    ).conversation
    two_models.LOOP_MODELS = []  # the operator took the server's model away: the mock alone
    two_models.LOOP_OPENAI_BASE_URL = ""
    page = as_alice.get(f"/c/{conversation.pk}/").text
    text = header_text(page)
    assert text.startswith("model: mock · built in")
    assert f"(this conversation used {LLAMA}, no longer offered here)" in text
    worked()
    as_alice.post(f"/c/{conversation.pk}/send/", {"task": "More"})
    assert AgentRun.objects.order_by("pk").last().provider == "mock"
    conversation.refresh_from_db()
    assert conversation.model == "mock"


def test_when_no_model_can_run_the_header_and_a_send_say_why(as_alice, nothing_configured):
    nothing_configured.LOOP_MODEL = "groq:openai/gpt-oss-120b"  # and no GROQ_API_KEY
    page = as_alice.get("/").text
    assert "cannot run here: Model 'openai/gpt-oss-120b' runs on Groq and needs GROQ_API_KEY" in (
        header_text(page)
    )
    refused = as_alice.post("/send/", {"task": TASK})
    assert refused.status_code == 400
    assert "runs on Groq and needs GROQ_API_KEY" in refused.text
    assert not Conversation.objects.exists()


def test_the_run_works_on_the_model_it_recorded(
    as_alice, alice, two_models, openai_server, workspaces
):
    """The worker builds the run's client from what the run recorded: the picked model's request
    reaches the server, by that model's name."""
    two_models.LOOP_OPENAI_BASE_URL = openai_server.base_url
    openai_server.reply("391, from the server's model.")
    as_alice.post("/send/", {"task": TASK, "model": LLAMA})
    run = execute_run(AgentRun.objects.get())
    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "391, from the server's model.")
    [request] = [r for r in openai_server.requests if r.path.endswith("/chat/completions")]
    assert request.body["model"] == MODEL
    mocked = as_alice.post(f"/c/{run.conversation_id}/send/", {"task": TASK, "model": "mock"})
    assert mocked.status_code == 302
    assert execute_run(AgentRun.objects.order_by("pk").last()).answer == "17 * 23 = 391"
    assert len(openai_server.requests) == 1  # the mock's run asked the server nothing


def test_conversations_from_before_go_on_with_their_latest_run_s_model(alice):
    """The migration names each conversation's model from its latest run, qualified; one with
    no run stays on the default."""
    on_groq = new_conversation(alice)
    for provider, model in (("mock", "mock"), ("groq", "openai/gpt-oss-120b")):
        AgentRun.objects.create(
            user=alice, conversation=on_groq, task=TASK, provider=provider, model=model
        )
    on_mock = new_conversation(alice)
    AgentRun.objects.create(
        user=alice, conversation=on_mock, task=TASK, provider="mock", model="mock"
    )
    on_ollama = new_conversation(alice)
    AgentRun.objects.create(
        user=alice, conversation=on_ollama, task=TASK, provider="openai", model="qwen3:8b"
    )
    empty = new_conversation(alice)
    before = Conversation.objects.get(pk=on_groq.pk).updated_at
    with connection.schema_editor() as schema_editor:
        MOVE_TO_MODEL_NAMES.name_from_latest_run(apps, schema_editor)
    models = dict(Conversation.objects.values_list("pk", "model"))
    assert models == {
        on_groq.pk: "groq:openai/gpt-oss-120b",
        on_mock.pk: "mock",
        on_ollama.pk: "openai:qwen3:8b",
        empty.pk: "",
    }
    assert Conversation.objects.get(pk=on_groq.pk).updated_at == before  # the sidebar's order


# Resolving the model once per request


@contextmanager
def factory_calls() -> Iterator[Counter[str]]:
    """Calls of the factory's offered_models and resolve in this thread while it lasts, whatever
    name a module imported them under (counted by their code); resolve is told apart by whether
    offered_models called it (checking each offered name) or something else did."""
    calls: Counter[str] = Counter()
    offered, resolve = factory.offered_models.__code__, factory.resolve.__code__

    def profile(frame, event, arg) -> None:
        if event != "call":
            return
        if frame.f_code is offered:
            calls["offered_models"] += 1
        elif frame.f_code is resolve:
            inside = frame.f_back is not None and frame.f_back.f_code is offered
            calls["resolve in offered_models" if inside else "resolve"] += 1

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def test_a_send_resolves_its_model_once_and_computes_the_offered_models_once(
    as_alice, alice, two_models
):
    two_models.LOOP_USER_ACTIVE_RUNS = 4
    conversation = new_conversation(alice)
    send = f"/c/{conversation.pk}/send/"
    for picked in (LLAMA, ""):  # a pick, and the conversation's own model
        worked()
        with factory_calls() as calls:
            answered = as_alice.post(send, {"task": TASK, "model": picked}, headers=HTMX)
        assert answered.status_code == 200
        assert 'id="conversation-model" hx-swap-oob="true"' in answered.text
        assert calls["offered_models"] == 1, calls
        assert calls["resolve"] == 0, calls  # not again by start_run, nor by the header
    assert list(AgentRun.objects.values_list("model", flat=True)) == [MODEL, MODEL]
    with factory_calls() as calls:
        assert as_alice.post("/send/", {"task": TASK, "model": "mock"}).status_code == 302
    assert (calls["offered_models"], calls["resolve"]) == (1, 0), calls


def test_a_page_computes_the_offered_models_once_for_all_its_turns(as_alice, alice, two_models):
    two_models.LOOP_USER_ACTIVE_RUNS = 4
    conversation = new_conversation(alice)
    halted = [start_run(alice, TASK, model="mock", conversation=conversation) for _ in range(3)]
    # Halted, each turn asks whether its model is still offered (its Continue button).
    AgentRun.objects.update(status=RunStatus.HALTED)
    with factory_calls() as calls:
        page = as_alice.get(f"/c/{conversation.pk}/").text
    assert all(f'action="/runs/{run.pk}/continue/"' in page for run in halted)
    assert (calls["offered_models"], calls["resolve"]) == (1, 0), calls


def test_the_run_records_import_no_model_factory():
    """Whether a run's model is still offered is asked of agent.selectors, not of the model: so
    importing agent/models.py (every process does) loads no model client."""
    tree = ast.parse(Path(agent_models.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not [name for name in imported if name and name.startswith("agent.llm")]
    assert not hasattr(AgentRun, "model_offered")
