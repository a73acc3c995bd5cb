"""A person's light or dark theme: the system's until they choose, kept in a cookie so the
server draws the chosen theme from the first byte (no flash of the other one)."""

from dataclasses import dataclass
from typing import Literal

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

COOKIE = "theme"
ONE_YEAR = 365 * 24 * 3600
Choice = Literal["light", "dark", "system"]
CHOICES: tuple[Choice, ...] = ("light", "dark", "system")
LABELS = (("light", "Light"), ("dark", "Dark"), ("system", "System"))


@dataclass(frozen=True)
class Theme:
    """The theme a page is drawn in: `choice` as the person made it, `dark_media` the media
    query under which static/loop/dark.css applies, `color_scheme` the page's <meta> for the
    browser's own controls and scrollbars."""

    choice: Choice

    @property
    def dark_media(self) -> str:
        return {"light": "not all", "dark": "all", "system": "(prefers-color-scheme: dark)"}[
            self.choice
        ]

    @property
    def color_scheme(self) -> str:
        return {"light": "light", "dark": "dark", "system": "light dark"}[self.choice]


def chosen(request: HttpRequest) -> Theme:
    """The person's choice from their cookie; anything else (none, or garbled) is the system's."""
    value = request.COOKIES.get(COOKIE, "system")
    return Theme(value if value in CHOICES else "system")


def theme(request: HttpRequest) -> dict[str, object]:
    """Context processor: every page, the login pages included, drawn in the person's theme."""
    return {"theme": chosen(request), "theme_choices": LABELS}


@require_POST
def choose(request: HttpRequest) -> HttpResponse:
    """Keep the choice and go back where the person was. The page's script posts the same form
    and applies the theme in place, so a half-typed task is not reloaded away."""
    choice = request.POST.get("theme", "")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("chat:home")
    response = HttpResponseRedirect(back)
    if choice in ("light", "dark"):
        response.set_cookie(COOKIE, choice, max_age=ONE_YEAR, samesite="Lax", httponly=True)
    elif choice == "system":
        response.delete_cookie(COOKIE, samesite="Lax")
    return response
