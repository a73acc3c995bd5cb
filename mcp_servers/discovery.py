"""Discovery: ask a server for its tools and pin or hold what it lists (mcp_servers/pinning.py).

A server is discovered when it is added, when its operator or person asks ("Check now"), when a
call brought a list_changed notice, and by a periodic task for the site's servers. A failure is
recorded as the server's health and changes no pinned tool.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from mcp_servers import client
from mcp_servers.declared import apply_choices, declared_tools, ensure_declared
from mcp_servers.endpoints import endpoint_for
from mcp_servers.models import ENVIRONMENT, OAUTH, McpServer
from mcp_servers.pinning import Changes, apply_listing

logger = logging.getLogger(__name__)


class DiscoveryFailed(Exception):
    """The server could not be listed; the message says why (and is its recorded health)."""


def discover(server: McpServer, user: User | None = None) -> Changes:
    """List the server's tools as `user` (an OAuth server's, or the owner of a personal one)."""
    try:
        endpoint = endpoint_for(
            server, user or server.owner, seconds=settings.LOOP_MCP_DISCOVERY_SECONDS
        )
        listing = client.list_tools(endpoint)
    except Exception as error:  # the client's failures, credentials, a lost grant
        said = str(error) if isinstance(error, client.ServerFailed) else f"{server.name}: {error}"
        McpServer.objects.filter(pk=server.pk).update(last_error=said[:2000], stale=False)
        logger.info("MCP discovery of %s failed: %s", server.name, said)
        raise DiscoveryFailed(said) from None
    changes = apply_listing(server, listing, enabled_when_new(server))
    if server.source == ENVIRONMENT:
        apply_choices(server)
    return changes


def enabled_when_new(server: McpServer) -> set[str] | None:
    """Which tools first seen now are enabled (None: all). At a server's first listing, all of
    them (its operator or person just added it, and reviews the list); later, none: a tool a
    server adds afterwards waits for its reviewer to read it and enable it. A server declared in
    the environment follows its `tools`."""
    if server.source == ENVIRONMENT:
        return declared_tools(server.name)
    first = not McpServer.objects.filter(pk=server.pk, discovered_at__isnull=False).exists()
    return None if first else set()


def discover_site_servers() -> int:
    """The periodic task's work: each enabled server that needs no person's grant and was not
    listed for LOOP_MCP_LIST_EVERY_SECONDS, or that a call marked stale (it said its tools
    changed). Says how many answered."""
    ensure_declared()
    due = timezone.now() - timedelta(seconds=settings.LOOP_MCP_LIST_EVERY_SECONDS)
    servers = McpServer.objects.filter(enabled=True).exclude(auth=OAUTH)
    site = Q(owner__isnull=True) & (Q(discovered_at__isnull=True) | Q(discovered_at__lt=due))
    listed = 0
    for server in servers.filter(site | Q(stale=True)):
        try:
            discover(server)
            listed += 1
        except DiscoveryFailed:
            continue
    return listed


def discover_new_site_servers() -> int:
    """List the site's servers never tried yet (declared just now, say), so a command that works
    a run at once (`runagent`) offers their tools without waiting for the periodic task. A
    server that failed once is left to the periodic task. Says how many answered."""
    ensure_declared()
    new = McpServer.objects.filter(
        enabled=True, owner__isnull=True, discovered_at__isnull=True, last_error=""
    ).exclude(auth=OAUTH)
    listed = 0
    for server in new:
        try:
            discover(server)
            listed += 1
        except DiscoveryFailed:
            continue
    return listed
