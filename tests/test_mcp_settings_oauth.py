"""Connecting an OAuth server from the Tools page (mcp_servers/views.py over mcp_servers/oauth.py),
against the real authorization server and the real MCP server it protects (tests/mcp_servers/):
Connect sends the browser to sign in, the callback finishes the flow for that person only and
lists the tools, a lost grant shows Reconnect, Disconnect forgets the tokens; no token is ever in
the page."""

import html
import json
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.toolset import registry_for
from mcp_servers.models import OAUTH, PENDING, RECONNECT, McpConnection, McpServer
from mcp_servers.secrets import decrypt
from tests.mcp_servers.harness import (  # noqa: F401 (fixtures)
    Served,
    oauth_mcp_server_fixture,
    oauth_server_fixture,
)

# The authorization server's answers are read by Loop's own threads: committed for real.
pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/settings/tools/"
CALLBACK = "/settings/tools/oauth/callback/"


@pytest.fixture
def personal_on(settings):
    settings.LOOP_MCP_PERSONAL_HOSTS = ["127.0.0.1"]
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    return settings


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def connect_page(client: Client, server: McpServer) -> str:
    """Connect pressed: the page that sends the browser on, and where it sends it."""
    response = client.post(f"{PAGE}{server.pk}/connect/")
    assert response.status_code == 200
    url: str = response.context["authorization_url"]
    assert f'content="0; url={html.escape(url)}"' in response.text
    return url


def authorize(authorization_url: str) -> dict[str, str]:
    """The browser at the authorization server, which approves at once: what it brings back."""
    with httpx2.Client(trust_env=False, timeout=10) as browser:
        response = browser.get(authorization_url)
    assert response.status_code == 302, response.text
    location = urlsplit(response.headers["location"])
    assert location.path == CALLBACK
    return {key: values[0] for key, values in parse_qs(location.query).items()}


def offered(user: User) -> set[str]:
    return set(registry_for(user).tools)


def test_a_person_connects_their_oauth_server_and_its_tools_are_listed(
    alice, oauth_mcp_server, oauth_server, personal_on
):
    as_alice = signed_in(alice)
    data = {"name": "Notes", "url": oauth_mcp_server.url, "prefix": "", "auth": "oauth"}
    added = as_alice.post(PAGE, data, follow=True).text
    assert "Connect Notes to sign in there" in added
    assert "Not connected" in added
    server = McpServer.objects.get(owner=alice)
    assert (server.auth, server.sealed_headers) == (OAUTH, "")

    url = connect_page(as_alice, server)
    assert url.startswith(oauth_server.url)
    back = authorize(url)
    page = as_alice.get(CALLBACK, back, follow=True).text

    assert "Connected Notes." in page
    assert "Notes: Listed its tools: new tools:" in page
    assert "notes__add" in page
    assert "notes__add" in offered(alice)
    connection = McpConnection.objects.get(user=alice, server=server)
    tokens = json.loads(decrypt(connection.sealed_tokens))
    assert tokens["access_token"] not in page
    assert tokens["refresh_token"] not in page
    assert ">Disconnect<" in page

    McpConnection.objects.filter(pk=connection.pk).update(state=RECONNECT)
    lost = as_alice.get(PAGE).text
    assert "reconnect to use its tools" in lost
    assert ">Reconnect<" in lost
    assert ">Disconnect<" in lost

    gone = as_alice.post(f"{PAGE}{server.pk}/disconnect/", follow=True).text
    assert "Disconnected Notes" in gone
    assert not McpConnection.objects.filter(server=server).exists()
    assert "notes__add" not in offered(alice)


def test_a_flow_finishes_only_for_the_person_who_started_it(
    alice, bob, oauth_mcp_server, personal_on
):
    as_bob = signed_in(bob)
    data = {"name": "Bobs notes", "url": oauth_mcp_server.url, "prefix": "", "auth": "oauth"}
    as_bob.post(PAGE, data)
    theirs = McpServer.objects.get(owner=bob)
    back = authorize(connect_page(as_bob, theirs))

    page = signed_in(alice).get(CALLBACK, back, follow=True).text

    assert "Could not connect: This sign-in is not one Loop started for you" in page
    assert not McpConnection.objects.filter(user=alice).exists()
    assert McpConnection.objects.get(user=bob, server=theirs).state == PENDING
    assert signed_in(alice).post(f"{PAGE}{theirs.pk}/connect/").status_code == 404


def test_a_refusal_at_the_authorization_server_is_said_as_text(
    alice, oauth_mcp_server, personal_on
):
    as_alice = signed_in(alice)
    data = {"name": "Notes", "url": oauth_mcp_server.url, "prefix": "", "auth": "oauth"}
    as_alice.post(PAGE, data)
    server = McpServer.objects.get(owner=alice)
    [state] = parse_qs(urlsplit(connect_page(as_alice, server)).query)["state"]
    answer = {"error": "access_denied", "error_description": "<b>You said no</b>", "state": state}

    page = as_alice.get(CALLBACK, answer, follow=True).text

    assert "Notes did not grant access: access_denied &lt;b&gt;You said no&lt;/b&gt;" in page
    assert "<b>You said no" not in page
    again = as_alice.get(CALLBACK, answer, follow=True).text  # the flow ended: its state used
    assert "That sign-in was not one Loop started for you" in again
    assert "You said no" not in again


@pytest.mark.parametrize("state", ["", "a-state-loop-never-issued", "bobs"])
def test_a_refusal_with_no_sign_in_in_progress_shows_a_fixed_message(
    alice, bob, oauth_mcp_server, personal_on, state
):
    """Anyone can link a person to the callback with an `error` of their words: without a
    sign-in of that person's in progress, Loop's page says its own, never theirs."""
    if state == "bobs":  # a flow in progress, but another person's
        as_bob = signed_in(bob)
        data = {"name": "Notes", "url": oauth_mcp_server.url, "prefix": "", "auth": "oauth"}
        as_bob.post(PAGE, data)
        theirs = McpServer.objects.get(owner=bob)
        [state] = parse_qs(urlsplit(connect_page(as_bob, theirs)).query)["state"]
    said = "Your account is suspended: call +1 555 0100 to restore it"
    answer = {"error": "access_denied", "error_description": said, "state": state}

    page = signed_in(alice).get(CALLBACK, answer, follow=True).text

    assert "That sign-in was not one Loop started for you: nothing was connected." in page
    assert "suspended" not in page
    assert "access_denied" not in page


def test_a_site_oauth_server_open_to_the_person_is_theirs_to_connect_and_no_one_elses(
    alice, bob, oauth_mcp_server, personal_on
):
    site = McpServer.objects.create(
        name="Team notes", prefix="team", url=oauth_mcp_server.url, auth=OAUTH
    )
    site.users.add(alice)
    as_alice = signed_in(alice)
    assert "Team notes" in as_alice.get(PAGE).text

    page = as_alice.get(CALLBACK, authorize(connect_page(as_alice, site)), follow=True).text

    assert "Connected Team notes." in page
    assert "team__add" in offered(alice)
    assert "team__add" not in offered(bob)
    assert signed_in(bob).post(f"{PAGE}{site.pk}/connect/").status_code == 404
    assert signed_in(bob).post(f"{PAGE}{site.pk}/disconnect/").status_code == 404
    assert McpConnection.objects.filter(user=alice, server=site).exists()
