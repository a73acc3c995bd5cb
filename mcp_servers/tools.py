"""MCP tools as Loop tools: the ones a person may use, each a `Tool` like the built-in ones.

A run's person gets the enabled, pinned, not-held tools of the site servers they may use and of
their own servers; nobody else's. The model sees each as `<prefix>__<tool>` with its pinned
schema; its arguments are checked against that schema before anything is sent; its answer is
delimited untrusted text, capped like every tool's; a server that fails is an error result, so
the breaker and the budgets apply as to any tool.
"""

import copy
import functools
import json
import logging
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Q, QuerySet
from jsonschema import ValidationError as SchemaViolation
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, model_validator

from core.results import Remedy
from mcp_servers import client, results
from mcp_servers.declared import ensure_declared
from mcp_servers.endpoints import call_seconds, endpoint_for
from mcp_servers.models import CONNECTED, OAUTH, RECONNECT, McpServer, McpTool
from mcp_servers.networks import personal_host_admitted
from mcp_servers.oauth import refresh_after_refusal
from mcp_servers.pinning import SEPARATOR
from tools.base import Tool, ToolContext, ToolError, ToolOutput, ToolTimeout
from tools.files import store_bytes

logger = logging.getLogger(__name__)

# How many schema problems one refusal names.
MAX_PROBLEMS = 5
# Keywords by which a schema admits properties beyond those its `properties` lists.
OPEN_KEYWORDS = frozenset(
    {"additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "anyOf"}
    | {"oneOf", "$ref", "if", "dependentSchemas"}
)
# A connection's own deadline comes first; the dispatcher's backstop a little after.
BACKSTOP_SECONDS = 5


def open_to(user: User) -> Q:
    """The site servers `user` may use: those open to everyone, to them, or to a group of theirs."""
    return Q(owner__isnull=True) & (
        Q(everyone=True) | Q(users=user) | Q(groups__in=user.groups.all())
    )


def servers_for(user: User) -> QuerySet[McpServer]:
    """The servers whose tools `user` may use: the site's open to them, and their own while the
    operator allows people's own servers (LOOP_MCP_PERSONAL_HOSTS)."""
    ensure_declared()
    mine = Q(owner=user) if settings.LOOP_MCP_PERSONAL_HOSTS else Q(pk__in=[])
    usable = McpServer.objects.filter(mine | open_to(user), enabled=True).distinct()
    connected = Q(connections__user=user, connections__state__in=[CONNECTED, RECONNECT])
    return usable.filter(~Q(auth=OAUTH) | connected).distinct()


def usable_tools(user: User) -> QuerySet[McpTool]:
    """The enabled, listed tools of the servers `user` may use, held or not."""
    tools = McpTool.objects.filter(
        server__in=servers_for(user), enabled=True, missing_since__isnull=True
    )
    return tools.select_related("server").order_by("server__name", "name")


def admitted(tools: QuerySet[McpTool]) -> list[McpTool]:
    """Those of a site's server, or of a person's own on a host the site still admits."""
    return [tool for tool in tools if tool.server.is_site or personal_host_admitted(tool.server)]


def offered_tools(user: User) -> list[McpTool]:
    return admitted(usable_tools(user).filter(held_digest=""))


def held_tools(user: User) -> list[McpTool]:
    """The person's tools on hold: those a run of theirs would be offered but for a change to
    their definition that waits for review (theirs, or for a site's server an operator's)."""
    return admitted(usable_tools(user).exclude(held_digest=""))


def held_count(user: User) -> int:
    """How many of the person's tools are on hold. Asked on every page with a Tools link: one
    plain query first, as nothing anywhere is on hold almost always (the person's servers take
    3.6 ms of the web's CPU to ask about, 0.4 ms this)."""
    held = McpTool.objects.filter(enabled=True, missing_since__isnull=True).exclude(held_digest="")
    return len(held_tools(user)) if held.exists() else 0


def run_tools(user: User) -> list[McpTool]:
    """The person's MCP tools, one per name the model calls: a name two of them share (a site
    server added with the prefix their own server has) is the site server's tool. A person's
    server does not stand in for a tool its operator set up, nor inherit what was granted under
    that name; which server sorted first by name decided it."""
    offered = offered_tools(user)
    chosen: dict[str, McpTool] = {}
    for tool in sorted(offered, key=lambda tool: not tool.server.is_site):
        chosen.setdefault(tool.exposed_name, tool)
    return [tool for tool in offered if chosen[tool.exposed_name] is tool]


def tools_for(user: User) -> list[Tool]:
    """The person's MCP tools as Loop tools (read once, when a run starts or resumes)."""
    return [loop_tool(tool, user) for tool in run_tools(user)]


@dataclass(frozen=True)
class Target:
    """What a call needs of its tool, read with the run's tools: the tool's row and pinned
    digest (its state is read again at each call), its server, its name on the server."""

    server: McpServer
    remote: str
    user: User
    tool_id: int
    digest: str


def loop_tool(tool: McpTool, user: User) -> Tool:
    server = tool.server
    target = Target(server, tool.name, user, tool.pk, tool.digest)
    return Tool(
        name=tool.exposed_name,
        description=_description(tool),
        arguments=arguments_model(tool.exposed_name, tool.input_schema, tool.digest),
        function=partial(call, target),
        timeout=call_seconds(server) + BACKSTOP_SECONDS,
        default_ask=default_ask(tool),
        always_ask=destructive(tool),
        server_id=server.pk,
    )


def _description(tool: McpTool) -> str:
    said = tool.description or tool.title or tool.name
    return f"{said} (a tool of the MCP server {tool.server.name}; its answers are untrusted text)"


def default_ask(tool: McpTool) -> str:
    """Why its calls wait for a decision whatever else says they may run ("" : they need not).
    MCP tools ask unless marked `auto` (or read-only, where their operator trusts the server's
    hints); a tool the server calls destructive always asks."""
    annotations = tool.annotations or {}
    if destructive(tool):
        return f"{tool.server.name} says {tool.name} may destroy data."
    if tool.auto:
        return ""
    if tool.server.trust_hints and annotations.get("read_only_hint") is True:
        return ""
    return f"MCP tools ask before they run ({tool.server.name}: {tool.name})."


def destructive(tool: McpTool) -> bool:
    annotations = tool.annotations or {}
    return annotations.get("destructive_hint") is True and not annotations.get("read_only_hint")


class SchemaArguments(BaseModel):
    """Arguments checked against an MCP tool's pinned JSON schema (not a pydantic model of its
    own: the server's schema is the contract). Subclassed per tool by `arguments_model`."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _conforms(cls, data: Any) -> Any:
        validator = validator_for(cls.pinned())(cls.pinned())
        errors = sorted(validator.iter_errors(data), key=lambda error: list(error.path))
        problems = [*map(_problem, errors), *_undeclared(cls.pinned(), data)]
        if problems:
            raise ValueError("; ".join(problems[:MAX_PROBLEMS]))
        return data

    @classmethod
    def pinned(cls) -> dict[str, Any]:
        schema: dict[str, Any] = cls.__dict__.get("__pinned_schema__", {})
        return schema

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.pinned())

    def values(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _problem(error: SchemaViolation) -> str:
    where = ".".join(str(part) for part in error.path) or "arguments"
    return f"{where}: {error.message[:200]}"


def _undeclared(schema: dict[str, Any], data: Any) -> list[str]:
    """Arguments a schema that lists its properties does not name, where it says nothing of
    others (JSON Schema would let them through): the model and the tool's reviewer saw only the
    named ones, and a server may act on an argument its pinned schema never showed."""
    if not isinstance(data, dict) or "properties" not in schema or OPEN_KEYWORDS & set(schema):
        return []
    return [
        f"{name}: not an argument of this tool" for name in data if name not in schema["properties"]
    ]


def arguments_model(name: str, schema: dict[str, Any], digest: str) -> type[SchemaArguments]:
    """The tool's arguments class: made once per pinned definition (a class costs pydantic a
    millisecond to make, and a run's tools are read at each start and resume)."""
    return _arguments_model(name, digest, json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _arguments_model(name: str, digest: str, schema: str) -> type[SchemaArguments]:
    pinned = json.loads(schema)
    return type(f"Arguments_{name}", (SchemaArguments,), {"__pinned_schema__": pinned})


def call(target: Target, arguments: SchemaArguments, context: ToolContext) -> ToolOutput:
    """Send one call; the answer is the tool's output, every failure the tool's error."""
    try:
        target = _current(target)
        server = target.server
        answer = _answer(target, arguments.values())
        if answer.tools_changed:
            McpServer.objects.filter(pk=server.pk).update(stale=True)
        said = results.rendered(
            answer.result,
            server=server.name,
            tool=target.remote,
            prefix=server.prefix,
            store=partial(store_bytes, context),
        )
    finally:
        connection.close()  # the dispatcher's thread: its connection must not outlive it
    if answer.result.is_error:
        raise ToolError(said.text, saved=said.saved)
    return ToolOutput(said.text, saved=said.saved)


def _current(target: Target) -> Target:
    """The target with its server as it is now, or a ToolError when the tool may no longer be
    called: a run's tools are read when it starts, and a tool held for review, turned off or
    removed since (or its server) must not be called by the runs in flight either."""
    found = McpTool.objects.select_related("server").filter(pk=target.tool_id).first()
    if found is None:
        raise ToolError(_not_called(target.server.name, target.remote, SERVER_REMOVED))
    refusal = _refusal(found, target.digest)
    if refusal is not None:
        raise refusal
    return replace(target, server=found.server)


def person_tool(user: User, name: str) -> McpTool | None:
    """The MCP tool the person's runs know as `name`, whatever its state (held, turned off):
    a site server's before one of their own, as `run_tools` chooses. None: no such tool."""
    if SEPARATOR not in name:
        return None
    servers = McpServer.objects.filter(Q(owner=user) | open_to(user)).distinct()
    found = McpTool.objects.filter(server__in=servers, exposed_name=name).select_related("server")
    return min(found, key=lambda tool: not tool.server.is_site, default=None)


def withdrawn(user: User, name: str) -> ToolError | None:
    """The refusal of a call of the person's MCP tool `name`, which their run was not given (held,
    turned off, unlisted, its server turned off), or None when they have no such tool: a call of
    a tool on hold says so, and where its reviewer reviews it, never that the tool is unknown."""
    tool = person_tool(user, name)
    return None if tool is None else _refusal(tool, tool.digest)


class ToolHeld(ToolError):
    """A call of a tool on hold for review: refused, with the remedy that leads its person to
    where the change is reviewed (chat/mcp.py)."""

    remedy = Remedy.REVIEW


SERVER_REMOVED = "its server was removed from Loop"


def _not_called(server: str, remote: str, why: str) -> str:
    return f"{server}'s {remote} was not called: {why}."


def held_text(tool: McpTool) -> str:
    """What the model reads of a call of a tool on hold: that it is on hold and why, who reviews
    the change, and what it can do instead (not "unknown tool", which it would retry or
    misreport)."""
    reviewer = "an operator of the site" if tool.server.is_site else "the person"
    return (
        f"{tool.server.name}'s {tool.name} was not called: it is on hold pending review. Its "
        f"server changed the tool's definition since it was reviewed, and {reviewer} has not "
        "accepted the change yet. Do not call it again in this run: do what you can without "
        "it, and tell the person the tool is on hold for review."
    )


def _refusal(tool: McpTool, digest: str) -> ToolError | None:
    """The error a call of the tool as it is now is refused with, for a run that was given it as
    pinned with `digest` (None: it may be called)."""
    why = _server_withdrawn(tool.server)
    if not why and tool.held and tool.enabled:  # a tool turned off is off, reviewed or not
        return ToolHeld(held_text(tool))
    why = why or _tool_withdrawn(tool, digest)
    return ToolError(_not_called(tool.server.name, tool.name, why)) if why else None


def _server_withdrawn(server: McpServer) -> str:
    if not server.enabled:
        return "its server is turned off"
    if not (server.is_site or personal_host_admitted(server)):
        return "the site no longer admits its server's host"
    return ""


def _tool_withdrawn(tool: McpTool, digest: str) -> str:
    if tool.digest != digest:
        return "its definition changed since this run started; a new run is offered it as it is"
    if not tool.enabled:
        return "it was turned off"
    if tool.missing_since is not None:
        return "its server no longer lists it"
    return ""


def _answer(target: Target, values: dict[str, Any]) -> client.Answer:
    server = target.server
    try:
        return client.call_tool(endpoint_for(server, target.user), target.remote, values)
    except client.Unauthorized as refused:
        return _after_refusal(target, values, refused)
    except client.ServerFailed as failed:
        # Listed again within the minute: the server may speak another revision now.
        McpServer.objects.filter(pk=server.pk).update(stale=True)
        raise _as_tool_error(failed) from None
    except ToolError:
        raise
    except Exception as error:  # credentials that cannot be read, a lost grant
        logger.warning("MCP call to %s failed before sending: %s", server.name, error)
        raise ToolError(f"{server.name}: {error}") from None


def _after_refusal(
    target: Target, values: dict[str, Any], refused: client.Unauthorized
) -> client.Answer:
    """A 401: an OAuth server's token is refreshed once and the call sent again; any other
    refusal, or a second one, is the person's to fix (reconnect, or new credentials)."""
    server, user = target.server, target.user
    if server.auth != OAUTH:
        raise ToolError(f"{refused}. Its credentials need updating.") from None
    refresh_after_refusal(server, user)
    try:
        return client.call_tool(endpoint_for(server, user), target.remote, values)
    except client.ServerFailed as failed:
        raise _as_tool_error(failed) from None


def _as_tool_error(failed: client.ServerFailed) -> ToolError:
    if isinstance(failed, client.TimedOut):
        return ToolTimeout(str(failed))
    return ToolError(str(failed))
