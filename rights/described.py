"""Rights in words, for the console's pages: a group's, a person's, what a run was allowed."""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from mcp_servers.models import McpServer
from rights.effective import Rights

EVERY_MODEL = "every model the site offers"
EVERY_TOOL = "every built-in tool"
EVERY_SERVER = "every MCP server open to them"


def _names(values: frozenset[str] | None, every: str) -> str:
    if values is None:
        return every
    return ", ".join(sorted(values)) or "none"


def described(rights: Rights, server_names: dict[int, str]) -> list[tuple[str, str]]:
    """(what, which) lines; `server_names`: McpServer ids to names (a removed one says so)."""
    servers = None
    if rights.mcp_servers is not None:
        servers = frozenset(
            server_names.get(pk, f"server {pk} (removed)") for pk in rights.mcp_servers
        )
    return [
        ("Models", _names(rights.models, EVERY_MODEL)),
        ("Built-in tools", _names(rights.tools, EVERY_TOOL)),
        ("MCP servers", _names(servers, EVERY_SERVER)),
        ("Asked before each call", ", ".join(sorted(rights.ask)) or "nothing more than the site"),
    ]


def lines_html(lines: list[tuple[str, str]]) -> SafeString:
    items = format_html_join("", "<dt>{}</dt><dd>{}</dd>", lines)
    return format_html('<dl class="loop-rights">{}</dl>', items)


def server_names() -> dict[int, str]:
    return dict(McpServer.objects.values_list("pk", "name"))
