"""Groups with rights, and the site's tools and models, for the tests of group rights."""

from typing import Any

from django.contrib.auth.models import Group, User
from django.utils import timezone

from mcp_servers.models import McpServer, McpTool
from rights.models import GroupRights

# A second model the site offers: a Groq model with a key that is never used (no run in these
# tests reaches it: they are refused first, or run on the mock).
GROQ_MODEL = "groq:llama-3.3-70b-versatile"


def offering_two_models(settings: Any) -> None:
    """The mock (the default) and GROQ_MODEL, nothing else the environment configures."""
    settings.GROQ_API_KEY = "gsk-tests-never-sent"
    settings.LOOP_MODEL = ""
    settings.LOOP_MODELS = ["mock", GROQ_MODEL]
    settings.LOOP_OPENAI_BASE_URL = ""
    settings.LOOP_OPENAI_MODEL = ""


def group_with(name: str, *members: User, servers: Any = (), **rights: Any) -> Group:
    """A group of `members` whose rights are `rights` (GroupRights' fields) and `servers`."""
    group = Group.objects.create(name=name)
    row = GroupRights.objects.create(group=group, **rights)
    row.mcp_servers.set(servers)
    group.user_set.add(*members)
    return group


def site_server(prefix: str, tool: str, *people: User) -> McpServer:
    """A site MCP server open to `people`, with one pinned tool `<prefix>__<tool>` that runs
    without asking; its address answers nothing (a call that reached it would fail)."""
    server = McpServer.objects.create(
        name=prefix.capitalize(), prefix=prefix, url="https://mcp.invalid/mcp"
    )
    server.users.add(*people)
    McpTool.objects.create(
        server=server,
        name=tool,
        exposed_name=f"{prefix}__{tool}",
        description=f"{tool}, for the tests.",
        digest="0" * 64,
        pinned_at=timezone.now(),
        auto=True,
    )
    return server
