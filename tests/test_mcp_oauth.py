"""A person's OAuth connection to an MCP server (mcp_servers/oauth.py), against a real
authorization server and a real MCP server it protects (tests/mcp_servers/), both on 127.0.0.1.

Connecting goes through discovery, dynamic registration and PKCE as a browser would; refreshing
is proven by the authorization server's own count of token requests: fifty threads needing a
refresh at once make one, a 401 makes one, a revoked grant makes the connection ask to be
reconnected and nothing else. Tokens are looked for, in clear, in the database and the logs.
"""

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from agent.llm.scripted import answer, call
from agent.runs import new_conversation, start_run
from core.events import RunStatus, ToolCallFinished, loaded
from core.results import Remedy, ToolStatus
from engine.execution import execute_run
from mcp_servers import client
from mcp_servers.discovery import discover
from mcp_servers.endpoints import endpoint_for
from mcp_servers.models import (
    CONNECTED,
    OAUTH,
    PENDING,
    PERSON,
    RECONNECT,
    McpConnection,
    McpServer,
    McpTool,
)
from mcp_servers.oauth import (
    NeedsReconnect,
    OAuthFailed,
    bearer_for,
    disconnect,
    finish,
    refresh_after_refusal,
    start,
)
from mcp_servers.secrets import decrypt
from mcp_servers.tools import tools_for
from tests.conftest import wait_for
from tests.mcp_servers.harness import (  # noqa: F401 (the fixtures)
    Served,
    oauth_mcp_server_fixture,
    oauth_server_fixture,
    serve,
    serve_oauth,
)
from tests.test_mcp_tools import Midway
from tools.base import ToolContext, ToolRegistry

# Committed for real: refreshes happen in threads and commit on connections of their own.
pytestmark = pytest.mark.django_db(transaction=True)

REDIRECT = "https://loop.example/settings/tools/oauth/callback"
THREADS = 50


@pytest.fixture(autouse=True)
def loopback_allowed(settings: Any) -> Any:
    """The servers are on 127.0.0.1: a person's server there needs the operator's leave."""
    settings.LOOP_MCP_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    settings.LOOP_MCP_PERSONAL_HOSTS = ["127.0.0.1"]
    return settings


def own_server(user: AbstractBaseUser, served: Served) -> McpServer:
    server: McpServer = McpServer.objects.create(
        name="Notes", prefix="notes", owner=user, source=PERSON, url=served.url, auth=OAUTH
    )
    return server


def authorize(authorization_url: str) -> dict[str, str]:
    """What the browser brings back: the authorization server approves at once and redirects.
    (The browser is not Loop: its request, the state in its URL, is kept out of the logs.)"""
    with quiet("httpx2", "httpcore2"), httpx2.Client(trust_env=False, timeout=10) as browser:
        response = browser.get(authorization_url)
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(REDIRECT + "?")
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


@contextmanager
def quiet(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def connect(server: McpServer, user: AbstractBaseUser) -> None:
    back = authorize(start(server, user, REDIRECT))
    assert finish(user, back["state"], back["code"], REDIRECT, iss=back["iss"]) == server


def admin(served: Served, action: str) -> dict[str, Any]:
    with httpx2.Client(trust_env=False, timeout=10) as http:
        if action == "stats":
            response = http.get(f"{served.url}/admin/stats")
        else:
            response = http.post(f"{served.url}/admin/{action}")
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def refreshes(served: Served) -> int:
    return int(admin(served, "stats")["token_requests"].get("refresh_token", 0))


def expire(served: Served, server: McpServer, user: AbstractBaseUser) -> None:
    """Every access token dead at the authorization server and, in Loop's record, past due."""
    admin(served, "expire")
    McpConnection.objects.filter(server=server, user=user).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def added(server: McpServer, user: AbstractBaseUser) -> str:
    """The server's answer to add(2, 40), called with the person's current bearer token."""
    answer = client.call_tool(endpoint_for(server, user), "add", {"a": 2, "b": 40})
    assert not answer.result.is_error
    text: str = answer.result.content[0].text  # type: ignore[union-attr]
    return text


def row_text(server: McpServer) -> str:
    """Every column of the server's connections, as the database holds them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT row_to_json(c)::text FROM mcp_servers_mcpconnection c WHERE server_id = %s",
            [server.pk],
        )
        return "\n".join(row for (row,) in cursor.fetchall())


def stored_tokens(server: McpServer, user: AbstractBaseUser) -> dict[str, Any]:
    found = McpConnection.objects.get(server=server, user=user)
    tokens: dict[str, Any] = json.loads(decrypt(found.sealed_tokens))
    return tokens


@contextmanager
def servers_of_our_own(
    revision: str = "modern", access_seconds: int = 3600
) -> Iterator[tuple[Served, Served]]:
    """An authorization server for this test alone, and an MCP server it protects."""
    with serve_oauth("--access-seconds", str(access_seconds)) as issuer:
        arguments = ("--revision", revision, "--auth", "oauth", "--issuer", issuer.url)
        with serve(*arguments) as protected:
            yield issuer, protected


def short_lived_servers() -> AbstractContextManager[tuple[Served, Served]]:
    """Access tokens that live 30 s: due for a refresh as soon as they are issued."""
    return servers_of_our_own(access_seconds=30)


def at_once(count: int, work: Callable[[], str]) -> tuple[list[str], list[BaseException]]:
    """`work` in `count` threads released together, each with its own database connection."""
    gate = threading.Barrier(count, timeout=60)
    results: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            gate.wait()
            result = work()
            with lock:
                results.append(result)
        except BaseException as error:
            with lock:
                errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def test_connecting_discovers_registers_and_the_bearer_calls_the_server(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    registrations = admin(oauth_server, "stats")["registrations"]

    url = start(server, alice, REDIRECT)

    query = parse_qs(urlsplit(url).query)
    assert url.startswith(oauth_server.url + "/authorize?")
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [oauth_mcp_server.url]
    assert query["redirect_uri"] == [REDIRECT]
    pending = McpConnection.objects.get(server=server, user=alice)
    assert pending.state == PENDING
    assert query["state"][0] not in row_text(server)
    back = authorize(url)
    assert finish(alice, back["state"], back["code"], REDIRECT, iss=back["iss"]) == server

    connected = McpConnection.objects.get(server=server, user=alice)
    assert connected.state == CONNECTED
    assert connected.expires_at is not None
    assert connected.expires_at > timezone.now()
    assert admin(oauth_server, "stats")["registrations"] == registrations + 1
    assert added(server, alice) == "42"


def test_a_session_based_server_connects_and_refreshes_too(alice: AbstractBaseUser) -> None:
    with servers_of_our_own(revision="legacy") as (issuer, protected):
        server = own_server(alice, protected)
        connect(server, alice)
        assert added(server, alice) == "42"
        expire(issuer, server, alice)

        assert added(server, alice) == "42"

        assert refreshes(issuer) == 1


def test_connecting_again_reuses_the_registered_client(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    registrations = admin(oauth_server, "stats")["registrations"]

    connect(server, alice)

    assert admin(oauth_server, "stats")["registrations"] == registrations
    assert added(server, alice) == "42"


def test_a_token_not_due_is_used_as_it_is(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    before = refreshes(oauth_server)

    first, second = bearer_for(server, alice), bearer_for(server, alice)

    assert first == second
    assert refreshes(oauth_server) == before


def test_an_expired_token_is_refreshed_silently_and_the_rotated_refresh_token_kept(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    old = stored_tokens(server, alice)
    expire(oauth_server, server, alice)
    before = refreshes(oauth_server)

    assert added(server, alice) == "42"

    new = stored_tokens(server, alice)
    assert refreshes(oauth_server) == before + 1
    assert new["access_token"] != old["access_token"]
    assert new["refresh_token"] != old["refresh_token"]
    # The next refresh presents the rotated token: no reuse, the grant holds.
    expire(oauth_server, server, alice)
    assert added(server, alice) == "42"
    assert admin(oauth_server, "stats")["reuse_detected"] == 0


def test_a_token_expiring_within_a_minute_is_refreshed_before_use(
    alice: AbstractBaseUser,
) -> None:
    with short_lived_servers() as (issuer, protected):
        server = own_server(alice, protected)
        connect(server, alice)
        token = bearer_for(server, alice)  # it lives 30 s: due at once

        assert refreshes(issuer) == 1
        assert token == stored_tokens(server, alice)["access_token"]
        assert added(server, alice) == "42"


def test_fifty_runs_needing_a_refresh_at_once_make_one_refresh_request(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    expire(oauth_server, server, alice)
    before = refreshes(oauth_server)

    tokens, errors = at_once(THREADS, lambda: bearer_for(server, alice))

    assert errors == []
    assert refreshes(oauth_server) == before + 1
    assert len(tokens) == THREADS
    assert len(set(tokens)) == 1
    assert tokens[0] == stored_tokens(server, alice)["access_token"]
    assert admin(oauth_server, "stats")["reuse_detected"] == 0
    assert added(server, alice) == "42"


def test_a_401_refreshes_once_and_the_call_then_works(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    refused = bearer_for(server, alice)
    admin(oauth_server, "expire")  # dead at the server, though Loop thinks it has an hour
    before = refreshes(oauth_server)
    with pytest.raises(client.Unauthorized):
        client.call_tool(endpoint_for(server, alice), "add", {"a": 2, "b": 40})

    refresh_after_refusal(server, alice)
    refresh_after_refusal(server, alice, refused)  # another worker refused the same token

    assert refreshes(oauth_server) == before + 1
    assert bearer_for(server, alice) != refused
    assert added(server, alice) == "42"


def test_many_workers_refused_the_same_token_refresh_it_once(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    refused = bearer_for(server, alice)
    admin(oauth_server, "expire")
    before = refreshes(oauth_server)

    def after_refusal() -> str:
        refresh_after_refusal(server, alice, refused)
        return bearer_for(server, alice)

    tokens, errors = at_once(10, after_refusal)

    assert errors == []
    assert refreshes(oauth_server) == before + 1
    assert len(set(tokens)) == 1
    assert refused not in tokens
    assert added(server, alice) == "42"


def test_a_revoked_grant_asks_for_reconnecting_and_makes_no_more_requests(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    tokens = stored_tokens(server, alice)
    admin(oauth_server, "revoke")
    expire(oauth_server, server, alice)

    with pytest.raises(NeedsReconnect) as needs:
        bearer_for(server, alice)

    found = McpConnection.objects.get(server=server, user=alice)
    assert found.state == RECONNECT
    assert "invalid_grant" in found.last_error
    assert "Reconnect" in str(needs.value)
    assert server.name in str(needs.value)
    for secret in (tokens["access_token"], tokens["refresh_token"]):
        assert secret not in str(needs.value)
        assert secret not in found.last_error
    before = refreshes(oauth_server)
    with pytest.raises(NeedsReconnect):
        endpoint_for(server, alice)
    with pytest.raises(NeedsReconnect):
        refresh_after_refusal(server, alice)
    assert refreshes(oauth_server) == before


def test_a_grant_revoked_before_a_401_asks_for_reconnecting(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    bearer_for(server, alice)
    admin(oauth_server, "revoke")
    with pytest.raises(client.Unauthorized):
        client.call_tool(endpoint_for(server, alice), "add", {"a": 2, "b": 40})

    with pytest.raises(NeedsReconnect):
        refresh_after_refusal(server, alice)

    assert McpConnection.objects.get(server=server, user=alice).state == RECONNECT
    # Connecting again mends it.
    connect(server, alice)
    assert added(server, alice) == "42"


def test_another_persons_state_does_not_finish_their_flow(
    alice: AbstractBaseUser,
    bob: AbstractBaseUser,
    oauth_server: Served,
    oauth_mcp_server: Served,
) -> None:
    server = own_server(alice, oauth_mcp_server)
    back = authorize(start(server, alice, REDIRECT))

    with pytest.raises(OAuthFailed):
        finish(bob, back["state"], back["code"], REDIRECT)

    assert not McpConnection.objects.filter(user=bob).exists()
    assert McpConnection.objects.get(server=server, user=alice).state == PENDING
    finish(alice, back["state"], back["code"], REDIRECT)
    assert McpConnection.objects.get(server=server, user=alice).state == CONNECTED
    with pytest.raises(OAuthFailed):  # a state is used once
        finish(alice, back["state"], back["code"], REDIRECT)


def test_a_wrong_or_missing_state_finishes_nothing(
    alice: AbstractBaseUser, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    back = authorize(start(server, alice, REDIRECT))

    for state in ("", "not-the-state"):
        with pytest.raises(OAuthFailed):
            finish(alice, state, back["code"], REDIRECT)

    assert McpConnection.objects.get(server=server, user=alice).state == PENDING


def test_a_response_from_another_issuer_is_refused(
    alice: AbstractBaseUser, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    back = authorize(start(server, alice, REDIRECT))

    with pytest.raises(OAuthFailed, match="not from"):
        finish(alice, back["state"], back["code"], REDIRECT, iss="https://elsewhere.example")

    found = McpConnection.objects.get(server=server, user=alice)
    assert found.state == RECONNECT
    assert found.sealed_tokens == ""


def test_no_one_can_connect_another_persons_server(
    alice: AbstractBaseUser, bob: AbstractBaseUser, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)

    with pytest.raises(OAuthFailed):
        start(server, bob, REDIRECT)
    with pytest.raises(NeedsReconnect):
        bearer_for(server, bob)


def test_a_personal_server_on_loopback_is_refused_without_the_operators_leave(
    alice: AbstractBaseUser, oauth_mcp_server: Served, settings: Any
) -> None:
    settings.LOOP_MCP_PRIVATE_NETWORKS = []
    server = own_server(alice, oauth_mcp_server)

    with pytest.raises(OAuthFailed, match="loopback"):
        start(server, alice, REDIRECT)

    assert not McpConnection.objects.filter(server=server).exists()


def test_disconnecting_forgets_the_tokens_and_revokes_the_grant(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    revoked = admin(oauth_server, "stats")["grants"]["revoked"]

    disconnect(server, alice)

    assert not McpConnection.objects.filter(server=server, user=alice).exists()
    assert admin(oauth_server, "stats")["grants"]["revoked"] == revoked + 1
    with pytest.raises(NeedsReconnect, match="Connect"):
        bearer_for(server, alice)


def test_credentials_are_never_in_clear_in_the_database_or_the_logs(
    alice: AbstractBaseUser,
    oauth_server: Served,
    oauth_mcp_server: Served,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = own_server(alice, oauth_mcp_server)
    url = start(server, alice, REDIRECT)
    found = McpConnection.objects.get(server=server, user=alice)
    client_info = json.loads(decrypt(found.sealed_client))
    verifier = decrypt(found.sealed_verifier)
    back = authorize(url)
    finish(alice, back["state"], back["code"], REDIRECT)
    first = stored_tokens(server, alice)
    expire(oauth_server, server, alice)
    added(server, alice)
    second = stored_tokens(server, alice)
    admin(oauth_server, "revoke")
    expire(oauth_server, server, alice)
    with pytest.raises(NeedsReconnect):
        bearer_for(server, alice)

    secrets = [
        client_info["client_secret"],
        verifier,
        back["state"],
        back["code"],
        first["access_token"],
        first["refresh_token"],
        second["access_token"],
        second["refresh_token"],
    ]
    stored = row_text(server)
    assert "last_error" in stored
    assert "sealed_tokens" in stored
    for secret in secrets:
        assert secret not in stored
        assert secret not in caplog.text
    assert "Refreshed" in caplog.text  # the logs were captured, and say what happened


def test_a_refresh_inside_a_rolled_back_transaction_keeps_the_rotated_refresh_token(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served
) -> None:
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    old = stored_tokens(server, alice)
    expire(oauth_server, server, alice)

    with transaction.atomic():
        token = bearer_for(server, alice)
        transaction.set_rollback(True)  # the caller's work fails: its transaction rolls back

    kept = stored_tokens(server, alice)
    assert kept["access_token"] == token
    assert kept["refresh_token"] != old["refresh_token"]
    expire(oauth_server, server, alice)
    assert added(server, alice) == "42"
    assert admin(oauth_server, "stats")["reuse_detected"] == 0


def test_a_runs_tool_refreshes_after_a_401_and_a_revoked_grant_is_an_error_result(
    alice: AbstractBaseUser, oauth_server: Served, oauth_mcp_server: Served, tmp_path: Path
) -> None:
    """Through the run's own tool dispatch: a 401 costs one refresh and the call goes through;
    a revoked grant is the tool's error result saying to reconnect, never an exception."""
    server = own_server(alice, oauth_mcp_server)
    connect(server, alice)
    discover(server, alice)
    registry = ToolRegistry(tools_for(alice))
    context = ToolContext(user_id=alice.pk, username="alice", workspace=tmp_path)
    admin(oauth_server, "expire")  # dead at the server, though Loop thinks it has an hour
    before = refreshes(oauth_server)

    answered = registry.dispatch("notes__add", '{"a": 2, "b": 40}', context)

    assert answered.ok, answered.text
    assert "42" in answered.text
    assert refreshes(oauth_server) == before + 1
    admin(oauth_server, "revoke")
    refused = registry.dispatch("notes__add", '{"a": 2, "b": 40}', context)
    assert refused.status is ToolStatus.ERROR
    assert "press Reconnect" in refused.text
    assert McpConnection.objects.get(server=server, user=alice).state == RECONNECT


def test_an_unreachable_authorization_server_keeps_the_grant_for_the_next_try(
    alice: AbstractBaseUser,
) -> None:
    with short_lived_servers() as (issuer, protected):
        server = own_server(alice, protected)
        connect(server, alice)
        issuer.process.terminate()
        issuer.process.wait()

        with pytest.raises(OAuthFailed, match="could not be reached") as failed:
            bearer_for(server, alice)

        assert not isinstance(failed.value, NeedsReconnect)
        found = McpConnection.objects.get(server=server, user=alice)
        assert found.state == CONNECTED
        assert found.sealed_tokens


@contextmanager
def listening_at(host: str) -> Iterator[tuple[str, list[str]]]:
    """An HTTP service on `host` (a service of the operator's network), and the requests that
    reached it ("POST /register")."""
    arrived: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived.append(f"POST {self.path}")
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"client_id": "inside"}).encode())

        def log_message(self, *args: Any) -> None:
            pass

    service = ThreadingHTTPServer((host, 0), Recorder)
    thread = threading.Thread(target=service.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{service.server_address[1]}", arrived
    finally:
        service.shutdown()
        service.server_close()


@pytest.mark.parametrize("admitted", [[], ["127.0.0.2/32"]], ids=["public-only", "admitted"])
def test_a_site_servers_metadata_cannot_send_loop_to_another_private_host(
    settings: Any, alice: AbstractBaseUser, admitted: list[str]
) -> None:
    """A site server may be on the operator's network, at the host its operator declared
    (127.0.0.1 here); the OAuth URLs its documents name on other hosts are vetted as a person's
    server is. Its authorization server's metadata sends registration to 127.0.0.2, a service on
    the operator's network: Loop's POST is refused before it is sent, unless the operator
    admits that network (LOOP_MCP_PRIVATE_NETWORKS)."""
    settings.LOOP_MCP_PRIVATE_NETWORKS = admitted
    with (
        listening_at("127.0.0.2") as (inside, arrived),
        serve_oauth("--registration-endpoint", f"{inside}/register") as issuer,
        serve("--revision", "modern", "--auth", "oauth", "--issuer", issuer.url) as protected,
    ):
        site = McpServer.objects.create(
            name="Partner", prefix="partner", url=protected.url, auth=OAUTH, everyone=True
        )
        if admitted:
            assert start(site, alice, REDIRECT).startswith(f"{issuer.url}/authorize?")
            assert arrived == ["POST /register"]
            return
        with pytest.raises(OAuthFailed, match=re.escape("127.0.0.2 is a loopback address")):
            start(site, alice, REDIRECT)
        assert arrived == []


def test_a_refresh_whose_answer_was_lost_ends_in_reconnect_said_plainly(
    settings: Any, alice: AbstractBaseUser, workspaces: Path
) -> None:
    """The authorization server rotates refresh tokens and revokes the grant when an old one is
    presented. A run's first call refreshes, and the server makes the new tokens but answers
    past Loop's deadline: Loop never learns them. Its next call presents the refresh token it
    still holds, the server ends the grant, and the person is told so: the call's result
    carries the reconnect remedy (its card a Reconnect link), the Tools page says Reconnect and
    why. The run goes on to its answer; nothing crashes."""
    with short_lived_servers() as (issuer, protected):  # every call needs a refresh first
        server = own_server(alice, protected)
        connect(server, alice)
        discover(server, alice)
        McpTool.objects.filter(server=server).update(auto=True)
        protected_calls_before = admin(issuer, "stats")["introspections"]
        settings.LOOP_MCP_DISCOVERY_SECONDS = 5
        with httpx2.Client(trust_env=False, timeout=10) as http:
            http.post(f"{issuer.url}/admin/hold-refresh", json={"seconds": 120}).raise_for_status()

        def once_the_server_made_new_tokens() -> None:
            wait_for(lambda: admin(issuer, "stats")["held_answers"] == 1, "the held refresh")

        adds = [call("notes__add", {"a": 2, "b": 40}), call("notes__add", {"a": 1, "b": 2})]
        script = Midway([*adds, answer("could not add")], 2, once_the_server_made_new_tokens)
        conversation = new_conversation(alice)
        run = execute_run(
            start_run(alice, "a task", model="mock", conversation=conversation), llm=script
        )

        assert run.status == RunStatus.SUCCEEDED, (run.halt_reason, run.error)
        first, second = (
            loaded(event.kind, event.data)
            for event in run.events.filter(kind="tool_call_finished").order_by("seq")
        )
        assert isinstance(first, ToolCallFinished)
        assert isinstance(second, ToolCallFinished)
        assert (first.status, first.remedy) == (ToolStatus.ERROR, None)
        assert "did not answer within 5 seconds" in first.text
        assert (second.status, second.remedy) == (ToolStatus.ERROR, Remedy.RECONNECT)
        assert "Notes needs reconnecting" in second.text
        stats = admin(issuer, "stats")
        assert stats["reuse_detected"] == 1
        assert stats["grants"]["active"] == 0
        assert stats["introspections"] == protected_calls_before  # no call reached the server
        found = McpConnection.objects.get(server=server, user=alice)
        assert found.state == RECONNECT
        assert found.unanswered_at is not None

        as_alice = Client()
        as_alice.force_login(alice)
        card = as_alice.get(f"/c/{run.conversation_id}/").text
        assert card.count('<a class="card-link" href="/settings/tools/">Reconnect</a>') == 1
        page = as_alice.get("/settings/tools/").text
        assert ">Reconnect<" in page
        assert "An earlier refresh of Loop's access got no answer in time" in page
