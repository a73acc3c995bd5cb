"""Defence in depth on every page: a Content-Security-Policy that allows only the site's own
scripts and socket, no inline script or handler in any page for it to refuse, and no page made
for a logged-in person kept in a cache."""

from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from engine.execution import execute_run

pytestmark = pytest.mark.django_db


def policy(response) -> dict[str, list[str]]:
    header = response.headers["Content-Security-Policy"]
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: values for name, *values in directives}


class InlineParts(HTMLParser):
    """What a strict CSP would refuse in a page: an inline script, an event handler attribute, a
    javascript: URL, and (outside the admin) inline styles."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and not values.get("src"):
            self.scripts.append(f"<script> {values}")
        if tag == "style" or "style" in values:
            self.styles.append(f"<{tag}> {values}")
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.scripts.append(f"{tag} {name}={value}")


@pytest.fixture
def operator() -> User:
    return User.objects.create_superuser("root", password="a long enough passphrase 42")


@pytest.fixture
def run(alice, workspaces) -> AgentRun:
    """A finished run in a conversation, which remembered its outcome: every part of the page
    drawn, the delete form's offer to forget included."""
    run = execute_run(start_run(alice, "Compute the sum of 1..100 and save it to a file",
                                model="mock", conversation=new_conversation(alice)))  # fmt: skip
    return run


@pytest.fixture
def conversation_url(run) -> str:
    return f"/c/{run.conversation_id}/"


def pages(client: Client, user: User, urls: list[str]) -> dict[str, object]:
    client.force_login(user)
    return {url: client.get(url) for url in urls}


def test_every_page_has_a_policy_of_its_own_scripts_and_socket(client, alice, conversation_url):
    anonymous = {url: client.get(url) for url in ("/accounts/login/", "/accounts/signup/")}
    logged_in = pages(client, alice, ["/", conversation_url, "/accounts/password/", "/nowhere/"])
    for url, response in {**anonymous, **logged_in}.items():
        csp = policy(response)
        assert csp["script-src"] == ["'self'"], url
        assert csp["style-src"] == ["'self'"], url
        assert csp["default-src"] == ["'self'"], url
        assert csp["connect-src"] == ["'self'", "ws://testserver"], url
        assert csp["frame-ancestors"] == ["'none'"], url
        assert csp["object-src"] == ["'none'"], url
        assert csp["base-uri"] == ["'none'"], url


def test_over_https_the_socket_allowed_is_wss(client, alice):
    client.force_login(alice)
    assert policy(client.get("/", secure=True))["connect-src"] == ["'self'", "wss://testserver"]


def test_the_admin_keeps_scripts_to_its_own_and_may_use_inline_styles(client, operator):
    for url, response in pages(client, operator, ["/admin/", "/admin/agent/agentrun/"]).items():
        csp = policy(response)
        assert csp["script-src"] == ["'self'"], url
        assert csp["style-src"] == ["'self'", "'unsafe-inline'"], url
        assert csp["frame-ancestors"] == ["'none'"], url
    assert "'unsafe-inline'" not in policy(client.get("/accounts/login/"))["style-src"]


def test_no_page_carries_an_inline_script_or_handler(client, alice, operator, conversation_url):
    anonymous = {url: client.get(url) for url in ("/accounts/login/", "/accounts/signup/")}
    chat = pages(client, alice, ["/", conversation_url, "/accounts/password/"])
    assert "Also forget what its runs remembered (1 memory)" in chat[conversation_url].text
    for url, response in {**anonymous, **chat}.items():
        found = InlineParts(response.text)
        assert (found.scripts, found.styles) == ([], []), url
    admin = pages(client, operator, ["/admin/", "/admin/agent/agentrun/", "/admin/memory/memory/"])
    for url, response in admin.items():
        assert InlineParts(response.text).scripts == [], url


def test_htmx_is_told_to_add_no_inline_style_and_evaluate_nothing(client, alice):
    client.force_login(alice)
    config = '{"includeIndicatorStyles": false, "allowEval": false}'
    assert f"<meta name=\"htmx-config\" content='{config}'>" in client.get("/").text


def test_every_answer_to_a_logged_in_person_is_private_and_not_stored(
    client, alice, operator, run, conversation_url
):
    urls = ["/", conversation_url, f"/runs/{run.pk}/", "/accounts/password/", "/nowhere/"]
    answers = pages(client, alice, urls)
    answers["send"] = client.post("/send/", {"task": "What is 1 + 1?"})  # a redirect
    answers.update(pages(client, operator, ["/admin/", "/admin/memory/memory/"]))
    for url, response in answers.items():
        directives = {d.strip() for d in response.headers["Cache-Control"].split(",")}
        assert {"private", "no-store"} <= directives, url
        assert "public" not in directives, url
