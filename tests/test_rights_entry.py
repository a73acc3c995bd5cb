"""Every entry point asks rights_of: the chat (its model picker, a forged send), the API (runs,
its model and tool lists, /v1/ and AG-UI), and `runagent` refuse a model the person's groups do
not allow before anything is stored, and list only what they allow; a person in no group with
rights under LOOP_UNGROUPED_RIGHTS=none can start nothing, and the chat says so."""

import html
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation
from tests.rights_helpers import GROQ_MODEL, group_with, offering_two_models, site_server

pytestmark = pytest.mark.django_db

NOT_ALLOWED = f"You may not use the model '{GROQ_MODEL}'; nothing was sent."
NO_MODEL = "Your groups give you no model to run on"


@pytest.fixture
def only_mock(settings, alice):
    """The site offers two models; alice's one group allows the mock and read_file alone."""
    offering_two_models(settings)
    settings.LOOP_USER_ACTIVE_RUNS = 50
    return group_with(
        "readers",
        alice,
        all_models=False,
        model_names=["mock"],
        all_tools=False,
        tool_names=["read_file"],
    )


@pytest.fixture
def nobody_ungrouped(settings):
    settings.LOOP_UNGROUPED_RIGHTS = "none"


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def said(response: Any) -> str:
    """The page's text as a person reads it (its quotes unescaped)."""
    return html.unescape(response.content.decode())


def stored() -> tuple[int, int]:
    return AgentRun.objects.count(), Conversation.objects.count()


# The chat -------------------------------------------------------------------------------------


def test_the_chat_offers_only_the_models_the_groups_allow(only_mock, as_alice, bob, client):
    page = said(as_alice.get("/"))
    assert GROQ_MODEL not in page
    client.force_login(bob)  # in no group: the site's models, both
    assert GROQ_MODEL in said(client.get("/"))


def test_a_forged_send_of_a_model_not_allowed_is_refused_and_stores_nothing(only_mock, as_alice):
    refused = as_alice.post(reverse("chat:start"), {"task": "What is 2 + 2?", "model": GROQ_MODEL})
    assert refused.status_code == 400
    assert NOT_ALLOWED in said(refused)
    assert "The models you may use: mock." in said(refused)
    assert stored() == (0, 0)

    conversation = new_conversation(only_mock.user_set.get(), "mine")
    url = reverse("chat:send", args=[conversation.pk])
    refused = as_alice.post(url, {"task": "What is 2 + 2?", "model": GROQ_MODEL})
    assert refused.status_code == 400
    assert NOT_ALLOWED in said(refused)
    assert AgentRun.objects.count() == 0

    sent = as_alice.post(url, {"task": "What is 2 + 2?", "model": "mock"})
    assert sent.status_code == 302
    assert AgentRun.objects.get().allowed["rights"]["models"] == ["mock"]


def test_ungrouped_none_the_chat_says_so_instead_of_a_composer(nobody_ungrouped, as_alice):
    page = said(as_alice.get("/"))
    assert NO_MODEL in page
    assert 'id="task-form"' not in page
    refused = as_alice.post(reverse("chat:start"), {"task": "What is 2 + 2?"})
    assert refused.status_code == 400
    assert NO_MODEL in said(refused)
    assert stored() == (0, 0)


# The API ----------------------------------------------------------------------------------------


def test_the_api_refuses_a_model_not_allowed_with_a_clear_error(only_mock, client, alice_key):
    refused = client.post(
        "/api/v1/runs",
        {"task": "What is 2 + 2?", "model": GROQ_MODEL},
        content_type="application/json",
        **bearer(alice_key),
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "model_not_offered"
    assert error["message"].startswith(NOT_ALLOWED)
    assert stored() == (0, 0)

    started = client.post(
        "/api/v1/runs",
        {"task": "What is 2 + 2?"},
        content_type="application/json",
        **bearer(alice_key),
    )
    assert started.status_code == 201
    assert AgentRun.objects.get().model == "mock"


def test_the_api_lists_only_the_models_and_tools_allowed(only_mock, client, alice, alice_key, bob):
    server = site_server("cal", "add_event", alice)
    models = client.get("/api/v1/models", **bearer(alice_key)).json()
    assert [model["name"] for model in models] == ["mock"]
    tools = [tool["name"] for tool in client.get("/api/v1/tools", **bearer(alice_key)).json()]
    assert tools == ["read_file", "cal__add_event"]  # every MCP server: the group's "all"

    only_mock.rights.all_mcp_servers = False
    only_mock.rights.save()
    tools = [tool["name"] for tool in client.get("/api/v1/tools", **bearer(alice_key)).json()]
    assert tools == ["read_file"]
    only_mock.rights.mcp_servers.add(server)
    tools = [tool["name"] for tool in client.get("/api/v1/tools", **bearer(alice_key)).json()]
    assert tools == ["read_file", "cal__add_event"]


def test_v1_lists_and_answers_only_the_models_allowed(only_mock, client, alice_key):
    listed = client.get("/v1/models", **bearer(alice_key)).json()
    assert [model["id"] for model in listed["data"]] == ["loop", "loop:mock"]
    refused = client.post(
        "/v1/chat/completions",
        {"model": f"loop:{GROQ_MODEL}", "messages": [{"role": "user", "content": "Hi"}]},
        content_type="application/json",
        **bearer(alice_key),
    )
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("model_not_allowed", "model")
    assert error["message"].startswith(NOT_ALLOWED)
    assert stored() == (0, 0)


def test_ungrouped_none_the_api_starts_nothing(
    nobody_ungrouped, client, alice_key, async_views_keep_the_tests_connection
):
    for path, body in (
        ("/api/v1/runs", {"task": "What is 2 + 2?"}),
        (
            "/v1/chat/completions",
            {"model": "loop", "messages": [{"role": "user", "content": "Hi"}]},
        ),
        (
            "/api/v1/agui",
            {
                "threadId": "new",
                "runId": "c1",
                "messages": [{"id": "m", "role": "user", "content": "Hi"}],
            },
        ),
    ):
        refused = client.post(path, body, content_type="application/json", **bearer(alice_key))
        assert refused.status_code == 400, path
        assert NO_MODEL in refused.json()["error"]["message"], path
    assert client.get("/api/v1/models", **bearer(alice_key)).json() == []
    assert client.get("/api/v1/tools", **bearer(alice_key)).json() == []
    assert stored() == (0, 0)


# runagent ---------------------------------------------------------------------------------------


def test_runagent_refuses_a_model_not_allowed_with_exit_2(only_mock, alice):
    with pytest.raises(CommandError, match="You may not use the model") as raised:
        call_command("runagent", "hi", "--user=alice", f"--model={GROQ_MODEL}", stdout=StringIO())
    assert raised.value.returncode == 2
    assert stored() == (0, 0)


def test_runagent_for_an_ungrouped_person_under_none_exits_2(nobody_ungrouped, alice):
    with pytest.raises(CommandError, match=NO_MODEL) as raised:
        call_command("runagent", "hi", "--user=alice", stdout=StringIO())
    assert raised.value.returncode == 2
    assert stored() == (0, 0)


def test_runagent_offers_the_model_only_the_tools_allowed(
    only_mock, alice, workspaces, monkeypatch
):
    """The run is worked by the worker's code: its model is shown read_file alone."""
    from agent.llm.scripted import ScriptedLLM, answer
    from engine import execution

    model = ScriptedLLM([answer("done")])
    monkeypatch.setattr(execution, "llm_for", lambda choice, deltas=None: model)
    call_command("runagent", "List my files", "--user=alice", stdout=StringIO())
    [(_, tools)] = model.turns
    assert [spec["function"]["name"] for spec in tools or []] == ["read_file"]
    assert AgentRun.objects.get().status == "succeeded"


def test_an_unauthenticated_client_is_not_asked(client: Client):
    assert client.get("/api/v1/models").status_code == 401
