"""What a card shows of a call to one of its person's MCP tools (mcp_servers/): the server and the
tool's own name, the tool's pinned description while a call waits, the images its answer saved in
the person's workspace (the result's saved files), a way to reconnect when the person's OAuth grant
was lost, and where a tool on hold is reviewed (the result's typed remedy): facts the call's event
carries as fields, never read from its text.

A tool is known by the name the model called it (`<prefix>__<tool>`) among the tools a run of
the person gets (agent.toolset.registry_for); any other name (a tool removed since, a name the
model made up) is shown as it is. The answer itself is the server's untrusted text: the cards
show it escaped, as every tool's output, never as HTML or markdown.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from django.contrib.auth.models import User
from django.urls import reverse

from mcp_servers.models import McpTool
from mcp_servers.pinning import SEPARATOR
from mcp_servers.results import IMAGE_SUFFIXES
from mcp_servers.tools import destructive, person_tool, run_tools
from workspace.browse import BrowseError, file_components


def reconnect_url() -> str:
    """Where a person reconnects their OAuth grants: their Tools settings page."""
    return reverse("mcp_settings")


# A description is capped when pinned (LOOP_MCP_DESCRIPTION_CHARS); the card caps it again, so
# no description, however it was stored, fills the page.
DESCRIPTION_CHARS = 2000
# The kinds of file an MCP answer's images are kept as (mcp_servers.results), as a card shows them.
SHOWN_SUFFIXES = frozenset(f".{suffix}" for suffix in IMAGE_SUFFIXES.values())


@dataclass(frozen=True)
class McpShown:
    """One MCP tool of the person, as their cards name it."""

    server: str
    tool: str  # the server's own name for it
    prefix: str
    description: str
    always_ask: bool  # destructive: a conversation's "always allow" would not lift its asking


def is_mcp(name: str) -> bool:
    return SEPARATOR in name


def tools_of(user: User) -> dict[str, McpShown]:
    """The person's MCP tools by the name the model calls them: those a run of theirs gets."""
    return {row.exposed_name: shown_tool(row) for row in run_tools(user)}


def shown_tool(row: McpTool) -> McpShown:
    return McpShown(
        server=row.server.name,
        tool=row.name,
        prefix=row.server.prefix,
        description=capped(row.description or row.title),
        always_ask=destructive(row),
    )


@dataclass(frozen=True)
class Hold:
    """Where the change that put one of the person's MCP tools on hold is reviewed: on their own
    Tools page (`review_url`), or, for a site's server, by an operator (no page of theirs)."""

    shown: McpShown
    review_url: str  # "": an operator reviews it

    @property
    def yours(self) -> bool:
        return bool(self.review_url)


def hold_of(user: User, name: str) -> Hold | None:
    """The hold on the person's MCP tool `name`, as a card about it links to it; None when they
    have no such tool (removed since). A card drawn after the change was accepted still leads
    to the tool's page, where it is offered again."""
    row = person_tool(user, name)
    if row is None:
        return None
    url = "" if row.server.is_site else f"{reverse('mcp_settings')}#review-{row.pk}"
    return Hold(shown_tool(row), url)


def capped(description: str) -> str:
    if len(description) <= DESCRIPTION_CHARS:
        return description
    return description[:DESCRIPTION_CHARS] + "…"


def saved_images(saved: Sequence[str]) -> list[dict[str, str]]:
    """The images the call kept (its event's `saved` paths, which Loop set as it stored them:
    a server's text naming a file shows none), each with its <img> URL and its Files panel
    link; only ever from the workspace of the person reading (the Files panel's views serve
    their own files alone)."""
    images = []
    for path in dict.fromkeys(saved):
        if PurePosixPath(path).suffix not in SHOWN_SUFFIXES:
            continue
        try:
            inside = "/".join(file_components(path))
        except BrowseError:
            continue
        images.append(
            {
                "path": inside,
                "src": reverse("files_image", args=[inside]),
                "url": reverse("files_view", args=[inside]),
            }
        )
    return images
