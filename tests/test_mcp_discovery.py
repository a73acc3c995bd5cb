"""Discovery (mcp_servers/discovery.py) against a real MCP server: a server's tools are enabled
when it is added, a tool it adds later waits for its reviewer, and the periodic task lists the
servers that are due."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from mcp_servers.discovery import discover, discover_site_servers
from mcp_servers.models import McpServer, McpTool
from mcp_servers.tools import offered_tools
from tests.mcp_servers.harness import modern_server_fixture  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def console_server(modern_server):
    return McpServer.objects.create(
        name="Demo", prefix="demo", url=modern_server.url, everyone=True
    )


def test_a_tool_the_server_adds_later_waits_to_be_enabled(console_server):
    first = discover(console_server)
    assert "add" in first.added
    assert McpTool.objects.filter(server=console_server, enabled=False).count() == 0
    McpTool.objects.filter(server=console_server, name="echo").delete()  # as if new since
    later = discover(console_server)
    assert later.added == ["echo"]
    echo = McpTool.objects.get(server=console_server, name="echo")
    assert (echo.enabled, echo.offered) == (False, False)
    assert McpTool.objects.get(server=console_server, name="add").enabled


def test_a_declared_server_follows_its_tools_list_for_new_tools(settings, modern_server):
    settings.LOOP_MCP_SERVERS = json.dumps(
        [{"name": "Env", "url": modern_server.url, "tools": ["add", "echo"]}]
    )
    assert discover_site_servers() == 1
    server = McpServer.objects.get(name="Env")
    McpTool.objects.filter(server=server, name="echo").delete()
    discover(server)
    enabled = set(
        McpTool.objects.filter(server=server, enabled=True).values_list("name", flat=True)
    )
    assert enabled == {"add", "echo"}


def test_the_periodic_task_lists_only_the_servers_due(console_server, settings):
    settings.LOOP_MCP_LIST_EVERY_SECONDS = 900
    assert discover_site_servers() == 1  # never listed: due
    assert discover_site_servers() == 0  # listed a moment ago
    McpServer.objects.filter(pk=console_server.pk).update(stale=True)
    assert discover_site_servers() == 1  # a call said its tools changed
    long_ago = timezone.now() - timedelta(seconds=901)
    McpServer.objects.filter(pk=console_server.pk).update(discovered_at=long_ago)
    assert discover_site_servers() == 1
    McpServer.objects.filter(pk=console_server.pk).update(url="http://127.0.0.1:9/mcp", stale=True)
    assert discover_site_servers() == 0  # it failed: counted out, its health says why
    assert McpServer.objects.get(pk=console_server.pk).last_error.startswith("Demo")


def test_a_persons_server_leaves_their_runs_when_its_host_is_no_longer_admitted(
    settings, modern_server, alice
):
    settings.LOOP_MCP_PERSONAL_HOSTS = ["127.0.0.1"]
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    mine = McpServer.objects.create(name="Mine", prefix="mine", owner=alice, url=modern_server.url)
    discover(mine)
    assert "mine__add" in {tool.exposed_name for tool in offered_tools(alice)}
    settings.LOOP_MCP_PERSONAL_HOSTS = ["mcp.example.com"]
    assert offered_tools(alice) == []
    settings.LOOP_MCP_PERSONAL_HOSTS = []
    assert offered_tools(alice) == []
