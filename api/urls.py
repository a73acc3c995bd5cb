"""The API's addresses, outside the pages' login: a request is its key's person or nobody
(api/auth.py), whatever cookie it carries."""

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver

from api.main import api


def keyed(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    """The API's patterns, exempt from the pages' LoginRequiredMiddleware (a key is checked
    instead; the schema and its docs page are public)."""
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            view: Callable[..., Any] = pattern.callback
            pattern.callback = login_not_required(view)
    return patterns


patterns, app_name, namespace = api.urls
urlpatterns = keyed(list(patterns))
