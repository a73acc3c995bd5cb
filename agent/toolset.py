"""The tools a run gets: the tools app's own, memory's `remember`, and the MCP tools its person
may use (mcp_servers/tools.py)."""

from functools import partial

from django.contrib.auth.models import User

from mcp_servers.tools import tools_for, withdrawn
from memory.tools import REMEMBER
from rights.effective import Rights, rights_of
from tools.base import ToolRegistry
from tools.registry import BUILTIN_TOOLS, registry_of


def default_registry() -> ToolRegistry:
    """Loop's own tools, the same for everyone."""
    return registry_of([*BUILTIN_TOOLS, REMEMBER])


def registry_for(user: User, rights: Rights | None = None) -> ToolRegistry:
    """The tools of a run of `user`: Loop's own and their MCP tools, nobody else's, those only
    that `rights` allow (agent.allowed.allowed_now; None: the person's rights as they stand).
    A tool outside them is not offered, and a call of it is refused like an unknown tool's (with
    why one of their MCP tools not among them may not be called, for a call asked for before)."""
    rights = rights_of(user) if rights is None else rights
    remembering = [REMEMBER] if rights.memory else []  # an assistant without memory: no `remember`
    tools = [*BUILTIN_TOOLS, *remembering, *tools_for(user)]
    allowed = [tool for tool in tools if rights.allows_tool(tool.name, tool.server_id)]
    return registry_of(allowed, partial(withdrawn, user))
