"""The one navigation every page a person sees carries (templates/nav.html): which of its
places the page belongs to, and the counts its links show."""

from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import SimpleLazyObject

from approvals.selectors import waiting_of
from workspace.requests import person_of

# Each place's URL names the pages under it; the longest match wins, and the chat ("/") holds
# every page no other place does (a conversation, the search).
PLACES = {
    "chat": "chat:home",
    "files": "files",
    "memories": "memories",
    "assistants": "assistants",
    "waiting": "chat:waiting",
    "approvals": "approval_settings",
    "instructions": "instruction_settings",
    "notifications": "notification_settings",
    "tools": "mcp_settings",
    "keys": "api_pages:keys",
    "shared_links": "shared_links",
    "my_data": "my_data",
    "password": "password_change",
}


def place_of(path: str) -> str:
    """The place `path` belongs to, for the navigation's aria-current."""
    under = {reverse(name): place for place, name in PLACES.items()}
    return under[max((url for url in under if path.startswith(url)), key=len)]


def navigation(request: HttpRequest) -> dict[str, object]:
    """Context processor, lazy: only a page that draws the navigation asks (not a fragment, not
    the page saying the database is down), and a view's own `awaiting` takes its place."""
    return {
        "nav_here": SimpleLazyObject(lambda: place_of(request.path)),
        "awaiting": SimpleLazyObject(lambda: waiting_of(person_of(request))),
    }
