"""How Loop reaches a server for a person: its URL or command, its credentials unsealed for
this one connection, the networks it may reach, its deadline and size bound."""

import json

from django.conf import settings
from django.contrib.auth.models import User

from mcp_servers.client import Endpoint
from mcp_servers.models import OAUTH, McpServer
from mcp_servers.networks import own_host_of, private_networks
from mcp_servers.oauth import bearer_for
from mcp_servers.secrets import decrypt


def headers_of(server: McpServer) -> dict[str, str]:
    if not server.sealed_headers:
        return {}
    headers: dict[str, str] = json.loads(decrypt(server.sealed_headers))
    return headers


def call_seconds(server: McpServer) -> float:
    """A call's time on `server`: its operator's, or the site's setting."""
    return float(server.call_seconds or settings.LOOP_MCP_CALL_SECONDS)


def endpoint_for(
    server: McpServer, user: User | None = None, *, seconds: float | None = None
) -> Endpoint:
    """The endpoint for `user` (whose OAuth token it carries, refreshed if due)."""
    headers = headers_of(server)
    if server.auth == OAUTH:
        headers["Authorization"] = f"Bearer {bearer_for(server, user)}"
    return Endpoint(
        label=server.name,
        url=server.url,
        command=tuple(str(part) for part in server.command),
        headers=headers,
        allowed=private_networks(),
        own_host=own_host_of(server),
        seconds=seconds or call_seconds(server),
        max_bytes=settings.LOOP_MCP_RESPONSE_BYTES,
        revision=server.protocol_version,
    )
