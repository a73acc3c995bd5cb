"""The re-check's other answers (tests/test_browser_identity.py has the provider's real
`invalid_grant`): a provider that cannot be reached, or answers a server error, changes nothing;
a rotated refresh token is kept; a person without one is not asked about; and the periodic job is
registered."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from procrastinate.contrib.django import app

from api.keys import create_key, key_for
from identity import discovery
from identity.deprovisioning import Outcome, recheck, recheck_due
from identity.models import ProviderIdentity
from mcp_servers.secrets import decrypt, encrypt

pytestmark = pytest.mark.django_db


class TokenEndpoint(ThreadingHTTPServer):
    status = 200
    answer: dict[str, Any]


class Handler(BaseHTTPRequestHandler):
    server: TokenEndpoint

    def do_GET(self) -> None:
        issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        document = {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/auth",
            "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks",
        }
        self.reply(200, document)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(self.server.status, self.server.answer)

    def reply(self, status: int, body: dict[str, Any]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def provider(settings) -> Iterator[TokenEndpoint]:
    server = TokenEndpoint(("127.0.0.1", 0), Handler)
    server.answer = {}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.LOOP_OIDC_ISSUER = f"http://127.0.0.1:{server.server_address[1]}"
    settings.LOOP_OIDC_CLIENT_ID = "loop"
    discovery.forget()
    yield server
    discovery.forget()
    server.shutdown()
    server.server_close()


@pytest.fixture
def alice_identity(settings, alice) -> ProviderIdentity:
    return ProviderIdentity.objects.create(
        user=alice,
        issuer=settings.LOOP_OIDC_ISSUER,
        subject="alice-0001",
        refresh_token=encrypt("the first refresh token"),
    )


def unchanged(identity: ProviderIdentity, secret: str) -> bool:
    identity.refresh_from_db()
    user = User.objects.get(pk=identity.user_id)
    return user.is_active and identity.removed_at is None and key_for(secret) is not None


@pytest.mark.parametrize(("status", "answer"), [(500, {}), (400, {"error": "invalid_client"})])
def test_an_answer_other_than_invalid_grant_changes_nothing(
    provider, alice_identity, status, answer
):
    secret = create_key(alice_identity.user, "script").secret
    provider.status, provider.answer = status, answer
    assert recheck(alice_identity) is Outcome.UNANSWERED
    assert unchanged(alice_identity, secret)


def test_a_provider_that_cannot_be_reached_changes_nothing(settings, alice_identity):
    settings.LOOP_OIDC_ISSUER = "http://127.0.0.1:9"  # discard: nothing listens
    discovery.forget()
    secret = create_key(alice_identity.user, "script").secret
    assert recheck(alice_identity) is Outcome.UNANSWERED
    assert unchanged(alice_identity, secret)
    discovery.forget()


def test_an_admitted_person_keeps_the_rotated_refresh_token(provider, alice_identity):
    provider.status, provider.answer = 200, {"access_token": "a", "refresh_token": "the second"}
    assert recheck_due()[Outcome.ADMITTED] == 1
    alice_identity.refresh_from_db()
    assert decrypt(alice_identity.refresh_token) == "the second"
    assert alice_identity.checked_at is not None
    assert recheck_due() == dict.fromkeys(Outcome, 0)  # not due again within the interval


def test_invalid_grant_ends_access(provider, alice_identity):
    secret = create_key(alice_identity.user, "script").secret
    provider.status, provider.answer = 400, {"error": "invalid_grant"}
    assert recheck(alice_identity) is Outcome.REMOVED
    assert not unchanged(alice_identity, secret)
    assert key_for(secret) is None


def test_a_person_without_a_refresh_token_is_not_asked_about(provider, alice_identity):
    ProviderIdentity.objects.filter(pk=alice_identity.pk).update(refresh_token="")
    alice_identity.refresh_from_db()
    provider.status, provider.answer = 400, {"error": "invalid_grant"}
    assert recheck(alice_identity) is Outcome.UNCHECKABLE
    assert User.objects.get(pk=alice_identity.user_id).is_active


def test_the_recheck_is_a_periodic_job():
    periodic = {task.periodic_id for task in app.periodic_registry.periodic_tasks.values()}
    assert "recheck_identities" in periodic
    assert "identity.recheck_identities" in app.tasks
