"""A stdio MCP server, which only an operator configures (LOOP_MCP_SERVERS `command`): Loop
starts it for each operation with a bare environment (none of the worker's secrets), lists its
tools, calls them like any other, and says clearly when the command cannot start."""

import json
import os
import sys

import pytest

from agent.toolset import registry_for
from mcp_servers.discovery import DiscoveryFailed, discover
from mcp_servers.models import McpServer
from tools.context import context_for

# Committed for real: a call reads its tool's state from the dispatcher's thread, on a
# connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "worker-secret-5521"


@pytest.fixture
def stdio_server(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("LOOP_TEST_WORKER_SECRET", SECRET)
    settings.LOOP_MCP_SERVERS = json.dumps(
        [
            {
                "name": "Local",
                "command": [
                    sys.executable,
                    "-m",
                    "tests.mcp_servers.stdio_app",
                    "--state-dir",
                    str(tmp_path),
                ],
                "auto": ["add", "echo"],
            }
        ]
    )
    return tmp_path


def test_a_stdio_server_is_listed_and_called(stdio_server, alice, workspaces):
    registry_for(alice)  # the declared server comes into the database
    server = McpServer.objects.get(name="Local")
    changes = discover(server)
    assert "add" in changes.added
    registry = registry_for(alice)
    result = registry.dispatch("local__add", '{"a": 20, "b": 22}', context_for(alice))
    assert (result.status, "\n42\n" in result.text) == ("ok", True), result.text


def test_a_stdio_server_gets_none_of_the_workers_environment(stdio_server, alice, workspaces):
    """The server's process starts with the SDK's bare environment (PATH, HOME and the like):
    the worker's secrets (its database URL, model keys) never reach it."""
    assert os.environ["LOOP_TEST_WORKER_SECRET"] == SECRET
    registry_for(alice)
    discover(McpServer.objects.get(name="Local"))
    result = registry_for(alice).dispatch("local__environment", "{}", context_for(alice))
    assert result.status == "ok"
    names = result.text.split("<<<mcp result>>>")[1].split("<<<end mcp result>>>")[0].split()
    assert "PATH" in names
    assert "LOOP_TEST_WORKER_SECRET" not in names
    assert not {name for name in names if name.startswith(("LOOP_", "DATABASE", "GROQ"))}


def test_a_command_that_cannot_start_is_a_clear_failure(settings, alice):
    settings.LOOP_MCP_SERVERS = json.dumps([{"name": "Gone", "command": ["/nonexistent/mcp"]}])
    registry_for(alice)
    with pytest.raises(DiscoveryFailed, match="Gone"):
        discover(McpServer.objects.get(name="Gone"))
    assert McpServer.objects.get(name="Gone").last_error.startswith("Gone")
