"""Bad input to the chat's and the logins' forms is a 400 that says what was wrong, never a 500:
a NUL in a conversation's new title, a form body in a charset other than UTF-8 (which Django's
error page read a second time), a broken multipart body. And every URL of the site (the admin's
have tests/test_admin_bad_input.py), walked from the resolver, with malformed values in each
query parameter a view reads and in its ids and paths: never a 500."""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLResolver, get_resolver
from django.utils import timezone

from agent.models import AgentRun, QueuedTask, RunEvent
from agent.runs import new_conversation, start_run
from assistants.models import Assistant
from engine.execution import execute_run
from mcp_servers.models import McpServer, McpTool
from memory.store import remember
from notifications.models import Endpoint
from workspace.directory import workspace_of

pytestmark = pytest.mark.django_db

UTF16_FORM = "application/x-www-form-urlencoded; charset=utf-16"
NOT_UTF8 = b"The form could not be read: HTTP requests with the 'application/x-www-form-urlencoded'"


def csrf_client() -> tuple[Client, str]:
    """A client that passes the CSRF check by its cookie and header, as a browser script would:
    the check then reads the form body too."""
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.get("/accounts/login/")
    return client, client.cookies["csrftoken"].value


def test_a_nul_in_a_renamed_title_is_refused_with_a_message(client, alice):
    conversation = new_conversation(alice, "Sums")
    client.force_login(alice)
    response = client.post(f"/c/{conversation.pk}/rename/", {"title": "a\x00b"})
    assert response.status_code == 400
    assert "The title was not changed: Null characters are not allowed." in response.text
    conversation.refresh_from_db()
    assert conversation.title == "Sums"


@pytest.mark.parametrize("debug", [False, True])  # in DEBUG the error page shows the form
def test_a_utf16_form_to_the_login_page_is_a_400_without_a_login(settings, debug):
    settings.DEBUG = debug
    client, token = csrf_client()
    response = client.post(
        "/accounts/login/",
        b"username=alice&password=guess",  # the test client sends it encoded as UTF-16
        content_type=UTF16_FORM,
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 400
    assert response.content.startswith(NOT_UTF8)


@pytest.mark.parametrize("debug", [False, True])
def test_a_utf16_form_to_a_logged_in_view_is_a_400_and_starts_nothing(settings, alice, debug):
    settings.DEBUG = debug
    client, token = csrf_client()
    client.force_login(alice)
    response = client.post(
        "/send/", b"task=What is 1 + 1?", content_type=UTF16_FORM, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 400
    assert response.content.startswith(NOT_UTF8)
    assert not AgentRun.objects.exists()


def test_a_multipart_body_without_a_boundary_is_a_400(alice):
    client, token = csrf_client()
    client.force_login(alice)
    response = client.post(
        "/send/",
        b"--x\r\n",
        content_type="multipart/form-data; boundary=",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 400
    assert b"The form could not be read: Invalid boundary in multipart" in response.content


# What an attacker (or a mangled link) puts in a query string or a path: a NUL, a digit int() does
# not read, a negative, a number past the database's integers, a fraction, a 10,000-character text.
MALFORMED = ("\x00", "²", "-1", "99999999999999999999", "1.5", "x" * 10_000)
# Every query parameter a view of the site reads, and a few any view might.
PARAMETERS = (
    *("q", "current", "run", "p", "page", "runs_page", "dir", "next"),
    *("error", "error_description", "state", "code", "iss"),
    *("after", "before", "path"),
)
CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")


def routes(resolver=None, prefix: str = "") -> Iterator[tuple[str, str]]:
    """Every URL pattern of the site as (route, name), the admin's aside (its own tests:
    tests/test_admin_bad_input.py)."""
    for entry in (resolver or get_resolver()).url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if entry.app_name != "admin":
                yield from routes(entry, route)
        else:
            yield route, entry.name


ROUTES = dict(routes())


@dataclass(frozen=True)
class Owned:
    """One of each thing a URL names, all alice's, so each view reads its query to the end."""

    alice: User
    ids: dict[str, int]
    files: dict[str, str]
    workspaces: Path


@pytest.fixture(scope="module")
def owned(module_records) -> Owned:
    def build() -> Owned:
        alice = User.objects.create_user("alice")
        conversation = new_conversation(alice, "Sums")
        run = execute_run(
            start_run(alice, "What is 1 + 1?", model="mock", conversation=conversation)
        )
        server = McpServer.objects.create(
            name="Mine", prefix="mine", url="https://mcp.invalid/mcp", owner=alice
        )
        tool = McpTool.objects.create(
            server=server,
            name="add",
            exposed_name="mine_add",
            digest="0" * 64,
            pinned_at=timezone.now(),
        )
        ids = {
            "conversation_id": conversation.pk,
            "run_id": run.pk,
            "seq": RunEvent.objects.filter(run=run)
            .order_by("-seq")
            .values_list("seq", flat=True)[0],
            "task_id": QueuedTask.objects.create(conversation=conversation, text="Then 2 + 2?").pk,
            "memory_id": remember(alice, "My cat is called Miso.").memory.pk,
            "server_id": server.pk,
            "tool_id": tool.pk,
            "assistant_id": Assistant.objects.create(owner=alice, name="Helper").pk,
            "endpoint_id": Endpoint.objects.create(
                owner=alice, url="https://hooks.invalid/loop"
            ).pk,
        }
        (workspace_of(alice) / "notes.txt").write_text("1 + 1 = 2\n")
        # A conversation's export's kind; a password reset link's parts (Django's own view).
        files = {"path": "notes.txt", "key": "answer", "kind": "md"}
        files |= {"uidb64": "MQ", "token": "set-password"}
        files |= {"rest": "1/change/"}  # an approvals console page at its old agent/ address
        files |= {"call_id": "call_1"}  # a waiting call, as the API names it
        return Owned(alice, ids, files, module_records.workspaces)

    return module_records.make(build)


def url_of(route: str, owned: Owned, **given: str) -> str:
    """The route with the parts `given`, the others the person's own (ids, a path, a slug)."""

    def part(match: re.Match) -> str:
        name = match.group(2)
        if name in given:
            return quote(given[name])
        return str(owned.ids[name]) if name in owned.ids else owned.files[name]

    return "/" + CONVERTER.sub(part, route)


@pytest.mark.parametrize(
    ("route", "query", "reason"),
    [
        ("search/", {"q": "a\x00b"}, "The address&#x27;s &#x27;q&#x27; holds a NUL character."),
        (
            "search/",
            {"current": "²"},
            "The address&#x27;s &#x27;current&#x27; is not a whole number",
        ),
        ("c/<int:conversation_id>/", {"q": "x" * 201}, "is 201 characters long, over the 200"),
        ("c/<int:conversation_id>/after/", {"run": "²"}, "&#x27;run&#x27; is not a whole number"),
    ],
)
def test_a_malformed_query_value_is_a_400_that_says_which(route, query, reason, owned, settings):
    settings.LOOP_WORKSPACES_DIR = owned.workspaces
    client = Client()
    client.force_login(owned.alice)
    response = client.get(url_of(route, owned), query, headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert reason in response.text


def served(client: Client, url: str) -> list[tuple[str, dict[str, str]]]:
    """The methods the URL serves (a 405 comes before any view reads its query), each as a
    page would send it and as htmx would, whose answers some views draw apart."""
    return [
        (method, headers)
        for method in ("get", "post")
        if getattr(client, method)(url).status_code != 405
        for headers in ({}, {"HX-Request": "true"})
    ]


@pytest.mark.parametrize("route", sorted(ROUTES), ids=lambda route: route or "home")
def test_a_malformed_query_value_is_never_a_server_error(route, owned, settings):
    """Each parameter alone, so a refusal of one does not hide what another would do."""
    settings.LOOP_WORKSPACES_DIR = owned.workspaces
    client = Client(raise_request_exception=False)
    client.force_login(owned.alice)
    url = url_of(route, owned)
    errors = [
        (method, headers, name, value[:20])
        for method, headers in served(client, url)
        for name in PARAMETERS
        for value in MALFORMED
        if getattr(client, method)(f"{url}?{urlencode({name: value})}", headers=headers).status_code
        >= 500
    ]
    assert errors == []


# What a path's parts take that they should not: ids past the database's integers and past what
# int() reads, a path with a NUL or of 10,000 characters, a slug as long.
MALFORMED_PARTS = {
    "int": ("0", "99999999999999999999", "9" * 10_000),
    "path": MALFORMED,
    "slug": ("x" * 10_000,),
    "": ("\x00", "x" * 10_000),  # a plain <part>: any text but a slash
    "str": ("\x00", "x" * 10_000),  # the same, named
}
WITH_PARTS = sorted(route for route in ROUTES if CONVERTER.search(route))


@pytest.mark.parametrize("route", WITH_PARTS)
def test_a_malformed_id_or_path_in_the_address_is_never_a_server_error(route, owned, settings):
    settings.LOOP_WORKSPACES_DIR = owned.workspaces
    client = Client(raise_request_exception=False)
    client.force_login(owned.alice)
    errors = [
        (method, name, value[:20])
        for converter, name in CONVERTER.findall(route)
        for value in MALFORMED_PARTS[converter]
        for method in ("get", "post")
        if getattr(client, method)(url_of(route, owned, **{name: value})).status_code >= 500
    ]
    assert errors == []
