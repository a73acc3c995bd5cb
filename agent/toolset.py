"""The tools a run gets: the tools app's own, memory's `remember`, and the MCP tools its person
may use (mcp_servers/tools.py)."""

from functools import partial

from django.contrib.auth.models import User

from mcp_servers.tools import tools_for, withdrawn
from memory.tools import REMEMBER
from tools.base import ToolRegistry
from tools.registry import BUILTIN_TOOLS, registry_of


def default_registry() -> ToolRegistry:
    """Loop's own tools, the same for everyone."""
    return registry_of([*BUILTIN_TOOLS, REMEMBER])


def registry_for(user: User) -> ToolRegistry:
    """The tools of a run of `user`: Loop's own and their MCP tools, nobody else's (and why one
    of their MCP tools not among them may not be called, for a call asked for before)."""
    return registry_of([*BUILTIN_TOOLS, REMEMBER, *tools_for(user)], partial(withdrawn, user))
