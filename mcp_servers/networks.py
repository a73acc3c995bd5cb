"""Which networks Loop may reach a server on, beyond the public internet: the guard's `allowed`.

Shared by the MCP connections (mcp_servers/endpoints.py) and the OAuth flow (mcp_servers/oauth.py),
which must not import each other's way round.
"""

import ipaddress

from django.conf import settings

from mcp_servers.models import McpServer
from mcp_servers.netguard import IPNetwork

# An operator's own server may be on the operator's network; the guard still refuses the cloud
# metadata addresses (mcp_servers/netguard.py).
ANYWHERE: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("0.0.0.0/0"),
    ipaddress.ip_network("::/0"),
)


def private_networks() -> tuple[IPNetwork, ...]:
    """The private networks an operator admits for people's own servers."""
    return tuple(
        ipaddress.ip_network(item, strict=False) for item in settings.LOOP_MCP_PRIVATE_NETWORKS
    )


def allowed_for(server: McpServer) -> tuple[IPNetwork, ...]:
    return ANYWHERE if server.is_site else private_networks()
