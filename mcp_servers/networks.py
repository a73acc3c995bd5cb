"""Which networks Loop may reach a server on, beyond the public internet: the guard's `allowed`
and `own_host`.

Shared by the MCP connections (mcp_servers/endpoints.py) and the OAuth flow (mcp_servers/oauth.py),
which must not import each other's way round.
"""

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings

from mcp_servers.models import McpServer
from netguard.ssrf import IPNetwork, host_of


def private_networks() -> tuple[IPNetwork, ...]:
    """The private networks an operator admits for people's own servers, and for any host a
    site server's documents name other than its own."""
    return tuple(
        ipaddress.ip_network(item, strict=False) for item in settings.LOOP_MCP_PRIVATE_NETWORKS
    )


def own_host_of(server: McpServer) -> str:
    """The one host `server`'s connections may reach on any network: a site server's own, as its
    operator declared it (its URL's); none for a person's. Every other host, whoever named it
    (an OAuth metadata document, a redirect), is vetted as a person's server is: public, or in
    LOOP_MCP_PRIVATE_NETWORKS."""
    return host_of(server.url) if server.is_site and server.url else ""


def host_admitted(host: str, patterns: list[str]) -> bool:
    """Whether the operator's list admits `host`: an exact name, `*.example.com` (a name under
    example.com, not example.com itself), or `*` (any host)."""
    host = host.lower().rstrip(".")
    for pattern in (item.strip().lower().rstrip(".") for item in patterns):
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


def personal_host_admitted(server: McpServer) -> bool:
    """Whether a person's server is on a host LOOP_MCP_PERSONAL_HOSTS admits now (the list may
    have shrunk since it was added)."""
    host = urlsplit(server.url).hostname or ""
    return host_admitted(host, settings.LOOP_MCP_PERSONAL_HOSTS)
