"""Start-up checks of the MCP settings: a mistake stops `manage.py check` (and so `make run`)
with a sentence saying what to fix, instead of failing at a person's first call."""

import ipaddress
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from mcp_servers.declared import declared
from mcp_servers.secrets import encrypt


@checks.register(checks.Tags.compatibility)
def mcp_settings(**kwargs: Any) -> list[checks.CheckMessage]:
    problems: list[checks.CheckMessage] = []
    try:
        declared()
    except ImproperlyConfigured as error:
        problems.append(checks.Error(str(error), id="mcp_servers.E001"))
    for item in settings.LOOP_MCP_PRIVATE_NETWORKS:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            problems.append(
                checks.Error(
                    f"LOOP_MCP_PRIVATE_NETWORKS: {item!r} is not a network (say 10.0.0.0/8).",
                    id="mcp_servers.E002",
                )
            )
    try:
        encrypt("")  # reads and checks the keys
    except ImproperlyConfigured as error:
        problems.append(checks.Error(str(error), id="mcp_servers.E003"))
    return problems
