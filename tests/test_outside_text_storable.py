"""Text from outside Loop that PostgreSQL cannot store (a NUL, which no text or jsonb value may
hold; a lone surrogate, which is not UTF-8) is stored with U+FFFD in its place, never a failed
write: an MCP server's answer and its listing (description and input schema, through the
person's and the console's pages), a model's reply and its calls' arguments. Before, a NUL failed
the whole run for good (`DataError`), and a NUL in a listing answered 500 with the server saved
without its tools."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, RunEvent
from agent.runs import new_conversation, start_run
from core.events import RunStatus
from core.text import REPLACEMENT, storable
from engine.execution import execute_run
from mcp_servers.discovery import discover
from mcp_servers.models import McpServer, McpTool
from tests.mcp_servers.harness import Served, modern_server_fixture  # noqa: F401 (fixture)
from tests.test_mcp_console import add_server, said
from tests.test_mcp_tools import body_of

pytestmark = pytest.mark.django_db(transaction=True)

NUL_SCHEMA = {
    "type": "object",
    "properties": {"na\x00me": {"type": "string", "description": "a\x00b"}},
}
SCHEMA_STORED = {
    "type": "object",
    "properties": {f"na{REPLACEMENT}me": {"type": "string", "description": f"a{REPLACEMENT}b"}},
}


@pytest.fixture
def changing(modern_server: Served):
    modern_server.reset()
    yield modern_server
    modern_server.reset()


def test_storable_replaces_nul_and_lone_surrogates_and_keeps_the_rest():
    assert (
        storable("a\x00b\ud800c\udfffd é 😀") == f"a{REPLACEMENT}b{REPLACEMENT}c{REPLACEMENT}d é 😀"
    )
    value = {"k\x00": ["x\x00", 1, None, {"y": "\ud83d"}], "ok": "plain"}
    assert storable(value) == {
        f"k{REPLACEMENT}": [f"x{REPLACEMENT}", 1, None, {"y": REPLACEMENT}],
        "ok": "plain",
    }
    clean = {"a": ["b", {"c": "d"}]}
    assert storable(clean) is clean  # nothing copied when nothing needs it


def test_a_nul_in_an_mcp_answer_is_stored_replaced_and_the_run_goes_on(
    alice, as_alice, workspaces, changing
):
    changing.set_changing("Answers.", answer="before\x00after")
    server = McpServer.objects.create(name="demo", prefix="demo", url=changing.url, everyone=True)
    discover(server)
    McpTool.objects.filter(server=server, name="changing").update(auto=True)
    script = ScriptedLLM([call("demo__changing"), answer("it said before and after")])
    run = start_run(alice, "a task", model="mock", conversation=new_conversation(alice))
    run = execute_run(run, llm=script)

    assert run.status == RunStatus.SUCCEEDED, run.error
    execution = run.tool_executions.get()
    assert (execution.status, body_of(execution.result)) == ("ok", f"before{REPLACEMENT}after")
    finished = RunEvent.objects.get(run=run, kind="tool_call_finished")
    assert body_of(finished.data["text"]) == f"before{REPLACEMENT}after"
    assert f"before{REPLACEMENT}after" in as_alice.get(f"/c/{run.conversation_id}/").text


def test_a_nul_in_a_model_reply_and_its_arguments_is_stored_replaced(alice, workspaces):
    script = ScriptedLLM(
        [
            call("list_files", '{"path": "\x00"}', text="looking\x00 around"),
            answer("the answer is\x00 here \ud800"),
        ]
    )
    run = execute_run(start_run(alice, "a task", model="mock"), llm=script)

    assert run.status == RunStatus.SUCCEEDED, run.error
    run = AgentRun.objects.get(pk=run.pk)
    assert run.answer == f"the answer is{REPLACEMENT} here {REPLACEMENT}"
    replies = RunEvent.objects.filter(run=run, kind="model_replied").order_by("seq")
    assert [reply.data["text"] for reply in replies] == [
        f"looking{REPLACEMENT} around",
        f"the answer is{REPLACEMENT} here {REPLACEMENT}",
    ]
    started = RunEvent.objects.get(run=run, kind="tool_call_started")
    assert started.data["arguments"] == f'{{"path": "{REPLACEMENT}"}}'
    assert run.tool_executions.get().arguments == f'{{"path": "{REPLACEMENT}"}}'


def test_a_nul_in_a_listing_is_pinned_replaced_through_the_persons_pages(
    settings, alice, as_alice, changing
):
    settings.LOOP_MCP_PERSONAL_HOSTS = ["127.0.0.1"]
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    changing.set_changing("Chan\x00ges.", NUL_SCHEMA)
    added = as_alice.post(
        "/settings/tools/",
        {"name": "Demo", "url": changing.url, "prefix": "", "auth": "none"},
        follow=True,
    )
    assert added.status_code == 200
    server = McpServer.objects.get(owner=alice)
    tool = server.tools.get(name="changing")
    assert (tool.description, tool.input_schema) == (f"Chan{REPLACEMENT}ges.", SCHEMA_STORED)

    checked = as_alice.post(f"/settings/tools/{server.pk}/check/", follow=True)
    assert checked.status_code == 200
    assert "nothing changed" in checked.text
    changing.set_changing("Changed\x00 again.", NUL_SCHEMA)
    checked = as_alice.post(f"/settings/tools/{server.pk}/check/", follow=True)
    assert checked.status_code == 200
    tool.refresh_from_db()
    assert tool.held
    assert tool.held_definition["description"] == f"Changed{REPLACEMENT} again."


def test_a_nul_in_a_listing_is_pinned_replaced_through_the_console(changing):
    editor = Client()
    editor.force_login(User.objects.create_superuser("root", "root@example.com", "a long one"))
    changing.set_changing("Chan\x00ges.", NUL_SCHEMA)
    response = add_server(editor, url=changing.url, auth="none")
    assert response.status_code == 200
    assert "Demo listed its tools" in said(response)
    server = McpServer.objects.get(prefix="demo")
    tool = server.tools.get(name="changing")
    assert (tool.description, tool.input_schema) == (f"Chan{REPLACEMENT}ges.", SCHEMA_STORED)

    changing.set_changing("Changed\x00 again.", NUL_SCHEMA)
    check = reverse("admin:mcp_servers_mcpserver_check", args=[server.pk])
    checked = editor.post(check, follow=True)
    assert checked.status_code == 200
    assert "1 held for review" in said(checked)
    tool.refresh_from_db()
    assert tool.held
    assert json.dumps(tool.held_definition, ensure_ascii=False).count(REPLACEMENT) == 3

    changing.set_changing("Changed\x00 once more.", NUL_SCHEMA)
    servers = reverse("admin:mcp_servers_mcpserver_changelist")
    listed = {"action": "check_now", "_selected_action": [server.pk]}
    assert editor.post(servers, listed, follow=True).status_code == 200
    tool.refresh_from_db()
    assert tool.held_definition["description"] == f"Changed{REPLACEMENT} once more."
