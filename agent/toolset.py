"""The tools a run gets: the tools app's own, memory's `remember`, and the MCP tools its person
may use (mcp_servers/tools.py), those only that the run's rights allow (rights.effective)."""

from functools import partial

from django.contrib.auth.models import User

from mcp_servers.tools import tools_for, withdrawn
from memory.tools import REMEMBER
from rights.effective import Rights, rights_of
from tools.base import Tool, ToolError, ToolRegistry
from tools.registry import BUILTIN_TOOLS, registry_of


def default_registry() -> ToolRegistry:
    """Loop's own tools, the same for everyone."""
    return registry_of([*BUILTIN_TOOLS, REMEMBER])


def registry_for(user: User, rights: Rights | None = None) -> ToolRegistry:
    """The tools of a run of `user`: Loop's own and their MCP tools, nobody else's, those only
    that `rights` allow (agent.allowed.allowed_now; None: the person's rights as they stand).
    A tool outside them is not offered, and a call of it (a model that names it anyway, a call
    asked for before the right was taken away) is refused saying so, never run; one of their
    MCP tools held or turned off is refused saying why (mcp_servers.tools.withdrawn)."""
    rights = rights_of(user) if rights is None else rights
    tools = [*BUILTIN_TOOLS, REMEMBER, *tools_for(user)]
    allowed = [tool for tool in tools if allows(rights, tool)]
    denied = {tool.name: tool for tool in tools if not allows(rights, tool)}
    return registry_of(allowed, partial(refusal, user, denied))


def allows(rights: Rights, tool: Tool) -> bool:
    if tool.name == REMEMBER.name and not rights.memory:  # an assistant without memory
        return False
    return rights.allows_tool(tool.name, tool.server_id)


def refusal(user: User, denied: dict[str, Tool], name: str) -> ToolError | None:
    """Why a call of `name`, a tool the run was not given, is not run (None: no such tool)."""
    tool = denied.get(name)
    if tool is None:
        return withdrawn(user, name)
    return ToolError(not_allowed_text(user, tool))


def not_allowed_text(user: User, tool: Tool) -> str:
    """What the model reads of a call of a tool its run may not use: who decided, and what to do
    instead (not "unknown tool", which it would retry or misreport)."""
    if not rights_of(user).allows_tool(tool.name, tool.server_id):
        why = f"Your groups do not allow the tool {tool.name}"
    elif tool.name == REMEMBER.name:
        why = "This conversation's assistant does not use long-term memory"
    else:
        why = (
            f"This run may not use the tool {tool.name} (its conversation's assistant, or your "
            "groups when it started, left it out)"
        )
    return (
        f"{why}, so it was not called. Do not call it again in this run: do what you can "
        "without it, and tell the person if they needed it."
    )
