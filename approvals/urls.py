"""The console's pages of approvals had the agent app's addresses (/admin/agent/approvalrequest/,
...) until approvals had an app of their own: an old bookmark, or a link in a mail or a log,
still lands on its page, at /admin/approvals/... (included under admin/agent/ by loopsite/urls.py,
ahead of the admin)."""

from typing import Any
from urllib.parse import quote

from django.urls import URLPattern, path, reverse
from django.views.generic import RedirectView

# The models the console has pages of, by the name their addresses use.
MOVED = ("approvalrequest", "sitetoolpolicy", "toolgrant")


class MovedConsolePage(RedirectView):
    """The page at its address under approvals, with the same rest of the path and query."""

    permanent = True

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        page = f"{reverse('admin:index')}approvals/{kwargs['model']}/{quote(kwargs['rest'])}"
        query = self.request.META.get("QUERY_STRING", "")
        return f"{page}?{query}" if query else page


def moved(model: str) -> list[URLPattern]:
    """The model's list page and every page under it."""
    view = MovedConsolePage.as_view()
    return [
        path(f"{model}/", view, {"model": model, "rest": ""}),
        path(f"{model}/<path:rest>", view, {"model": model}),
    ]


urlpatterns = [pattern for model in MOVED for pattern in moved(model)]
