"""What every page may show of a person's MCP tools: how many are on hold for review, for the
count on the Tools link (as "Waiting for you" counts the calls waiting)."""

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from mcp_servers.tools import held_count as held_count_of


def held_count(request: HttpRequest) -> dict[str, Any]:
    """`held_tools`: the number of the person's tools on hold, read only by a page that shows it
    (a page without the Tools link costs no query)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"held_tools": SimpleLazyObject(lambda: held_count_of(user))}
