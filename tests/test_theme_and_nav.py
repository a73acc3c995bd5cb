"""The theme's choice and the navigation's marks, from the server's side: the page arrives drawn
in the chosen theme (no flash of the other), the choice is kept only for this site's pages, and
each page marks its own place."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from chat.navigation import place_of

pytestmark = pytest.mark.django_db

DARK_SHEET = 'id="dark-theme"'


@pytest.fixture
def alice() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("alice"))
    return client


def dark_media(html: str) -> str:
    """The media under which the page's dark sheet applies, as the server drew it."""
    tag = html[: html.index(DARK_SHEET)]
    return tag[tag.rindex('media="') + len('media="') :].split('"')[0]


@pytest.mark.parametrize(
    ("cookie", "media", "scheme"),
    [
        ("dark", "all", "dark"),
        ("light", "not all", "light"),
        ("system", "(prefers-color-scheme: dark)", "light dark"),
        ("purple", "(prefers-color-scheme: dark)", "light dark"),
        (None, "(prefers-color-scheme: dark)", "light dark"),
    ],
)
def test_a_page_arrives_in_the_chosen_theme(alice, cookie, media, scheme):
    for client in (alice, Client()):  # the person's pages, and the login page
        if cookie:
            client.cookies["theme"] = cookie
        for url in ("/memories/", "/accounts/login/"):
            html = client.get(url, follow=True).text
            assert dark_media(html) == media
            assert f'<meta name="color-scheme" content="{scheme}">' in html


def test_choosing_keeps_the_choice_and_goes_back(alice):
    chosen = alice.post("/settings/theme/", {"theme": "dark", "next": "/files/?dir=a"})
    assert chosen.status_code == 302
    assert chosen.url == "/files/?dir=a"
    assert chosen.cookies["theme"].value == "dark"
    assert chosen.cookies["theme"]["httponly"]
    assert chosen.cookies["theme"]["samesite"] == "Lax"
    assert dark_media(alice.get("/files/").text) == "all"

    system = alice.post("/settings/theme/", {"theme": "system", "next": "/files/"})
    assert system.cookies["theme"].value == ""  # deleted: the system's again
    assert dark_media(alice.get("/files/").text) == "(prefers-color-scheme: dark)"


def test_choosing_goes_back_only_to_this_site_and_only_by_post(alice):
    away = alice.post("/settings/theme/", {"theme": "light", "next": "https://evil.example/"})
    assert away.url == "/"
    nonsense = alice.post("/settings/theme/", {"theme": "<b>", "next": "/"})
    assert "theme" not in nonsense.cookies
    assert alice.get("/settings/theme/").status_code == 405


@pytest.mark.parametrize(
    ("path", "place"),
    [
        ("/", "chat"),
        ("/c/12/", "chat"),
        ("/search/", "chat"),
        ("/files/", "files"),
        ("/files/view/a/b.txt", "files"),
        ("/memories/forget/", "memories"),
        ("/waiting/", "waiting"),
        ("/settings/approvals/", "approvals"),
        ("/settings/instructions/", "instructions"),
        ("/settings/tools/3/", "tools"),
        ("/accounts/data/", "my_data"),
        ("/accounts/password/done/", "password"),
    ],
)
def test_each_page_belongs_to_one_place(path, place):
    assert place_of(path) == place


def test_the_navigation_marks_the_page_and_counts_what_waits(alice):
    html = alice.get("/settings/approvals/").text
    assert html.count('aria-current="page"') == 1
    assert 'href="/settings/approvals/" aria-current="page">Approvals</a>' in html
    assert 'id="waiting-link">Waiting for you</a>' in html  # nothing waits: no count
