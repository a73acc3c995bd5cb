"""A server that echoes what it was sent hands back no credential: the site's shared token and
headers, and a person's own token, sent to a real SDK server that quotes its request's headers in
its answer, in an error result, in a protocol error and in its listing, appear in none of the
run's events, its tool executions, the model's next messages, the answer, the chat page, the
console's page of a call, or the person's export."""

import io
import json
import zipfile

import anyio
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, RunEvent, ToolExecution
from agent.runs import new_conversation, start_run
from engine.execution import execute_run
from mcp_servers import client as mcp_client
from mcp_servers.discovery import discover
from mcp_servers.endpoints import endpoint_for
from mcp_servers.models import HEADERS, PERSON, McpServer, McpTool
from mcp_servers.secrets import REDACTED, encrypt
from tests.mcp_servers.harness import Served, modern_server_fixture  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

SITE_TOKEN = "site-shared-token-5f2a91c0"
SITE_KEY = "site-api-key-77e3b1d4"
OWN_TOKEN = "alices-own-token-0c4d8e2b"
SECRETS = (SITE_TOKEN, SITE_KEY, OWN_TOKEN)
EXPORT = "/accounts/data/export/"


def server(served: Served, headers: dict[str, str], **fields: object) -> McpServer:
    """A server on `served` sending `headers`, its echoing tool running without asking."""
    made = McpServer.objects.create(
        url=served.url, auth=HEADERS, sealed_headers=encrypt(json.dumps(headers)), **fields
    )
    discover(made)
    McpTool.objects.filter(server=made, name="headers").update(auto=True)
    return made


@pytest.fixture
def echoing(settings, alice, modern_server) -> tuple[McpServer, McpServer]:
    """The site's server (a shared token and a key header) and alice's own (her token)."""
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    settings.LOOP_MCP_PERSONAL_HOSTS = ["127.0.0.1"]
    modern_server.reset()
    site = server(
        modern_server,
        {"Authorization": f"Bearer {SITE_TOKEN}", "X-Api-Key": SITE_KEY},
        name="site",
        prefix="site",
        everyone=True,
    )
    own = server(
        modern_server,
        {"Authorization": f"Bearer {OWN_TOKEN}"},
        name="mine",
        prefix="mine",
        owner=alice,
        source=PERSON,
    )
    return site, own


def exported_text(client) -> str:
    response = client.post(EXPORT)
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    return "\n".join(archive.read(name).decode(errors="replace") for name in archive.namelist())


def assert_secret_free(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {where}"


def test_credentials_a_server_echoes_are_blanked_wherever_its_words_go(
    alice, as_alice, workspaces, echoing
):
    script = ScriptedLLM(
        [
            call("site__headers"),
            call("site__headers", {"how": "error"}),
            call("mine__headers"),
            call("mine__headers", {"how": "error"}),
            answer("done"),
        ]
    )
    run = start_run(alice, "echo", model="mock", conversation=new_conversation(alice))
    run = execute_run(run, llm=script)

    results = list(run.tool_executions.order_by("step").values_list("status", "result", "error"))
    assert [status for status, _, _ in results] == ["ok", "error", "ok", "error"]
    said = json.dumps(results)
    assert said.count(REDACTED) == 6  # the site's token and key, alice's token; twice each
    assert '\\"x-api-key\\": \\"[redacted]\\"' in said  # the rest of its words are kept

    events = json.dumps(list(RunEvent.objects.filter(run=run).values_list("data", flat=True)))
    assert_secret_free(events, "the run's events")
    executions = ToolExecution.objects.filter(run=run).values()
    assert_secret_free(json.dumps(list(executions), default=str), "its tool executions")
    assert_secret_free(json.dumps(script.turns, default=str), "the model's messages")
    assert_secret_free(AgentRun.objects.get(pk=run.pk).answer, "the answer")
    assert_secret_free(as_alice.get(f"/c/{run.conversation_id}/").text, "the chat page")
    assert_secret_free(exported_text(as_alice), "the export")
    root = Client()
    root.force_login(User.objects.create_superuser("root", "root@example.com", "a long password"))
    for execution in ToolExecution.objects.filter(run=run):
        page = root.get(reverse("admin:agent_toolexecution_change", args=[execution.pk]))
        assert page.status_code == 200
        assert_secret_free(page.text, "the console's page of a call")


def test_credentials_a_server_echoes_in_its_listing_are_blanked_before_they_are_pinned(
    echoing, modern_server
):
    site, _ = echoing
    modern_server.set_changing(f"Send {SITE_TOKEN} as the key", {"type": "object"})
    discover(site)
    changing = McpTool.objects.get(server=site, name="changing")
    definition = json.dumps(changing.held_definition)
    assert f"Send {REDACTED} as the key" in definition
    assert_secret_free(definition, "the held definition")


def test_credentials_a_server_quotes_in_a_protocol_error_are_blanked(echoing):
    """A JSON-RPC error's message is quoted to the model (the SDK's server answers its own with
    HTTP 400, which is not quoted: this is another server's)."""
    site, _ = echoing
    refusal = MCPError(INVALID_PARAMS, f"no key {SITE_KEY} for Bearer {SITE_TOKEN}")
    with pytest.raises(mcp_client.ServerFailed) as failed:
        anyio.run(_raised_inside_failures, endpoint_for(site), refusal)
    assert f"no key {REDACTED} for {REDACTED}" in str(failed.value)


async def _raised_inside_failures(endpoint: mcp_client.Endpoint, error: Exception) -> None:
    async with mcp_client._failures(endpoint, mcp_client._Watch()):
        raise error
