"""A person's OAuth 2.1 connection to an MCP server: connecting in the browser, and the bearer
token each call carries, refreshed silently.

Connecting (`start`, then `finish` from the browser's return): the server's protected-resource
metadata (RFC 9728) names its authorization server, whose metadata (RFC 8414, or OpenID's) gives
the endpoints; Loop registers itself there (RFC 7591) when it has no client yet, and sends the
person to authorize with PKCE S256 and a `state` bound to them, for this server only (RFC 8707
`resource`).

Refreshing is where many-user clients go wrong (LibreChat's tracker: a refresh per worker at the
same expiry, a rotated refresh token replayed so the server revoked the grant, a person made to
sign in again on every 401). Here a refresh happens one at a time per (person, server) across
every process: under the connection row's lock, after reading the row again, and only if no one
else refreshed meanwhile; the new refresh token is stored before the lock is let go. A refusal
by the authorization server (a revoked grant) marks the connection for reconnecting and raises
`NeedsReconnect` (its result's remedy: reconnect); a network failure leaves the grant as it is,
to be tried again. A refresh sent whose answer is lost is marked (`unanswered_at`): a server that
rotated meanwhile refuses the old token next time and ends the grant, and the person is told why.

Every request goes through the SSRF guard with a deadline; tokens, codes, verifiers and client
secrets are stored sealed (mcp_servers/secrets.py) and never logged or put in a message.
"""

import base64
import hashlib
import json
import logging
import secrets
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import httpx2
from django.conf import settings
from django.contrib.auth.models import User
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from mcp.client.auth.oauth2 import PKCEParameters
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    issuers_match,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from psycopg.errors import LockNotAvailable
from pydantic import ValidationError

from core.results import Remedy
from mcp_servers.models import CONNECTED, OAUTH, PENDING, RECONNECT, McpConnection, McpServer
from mcp_servers.networks import own_host_of, private_networks
from mcp_servers.secrets import CredentialUnreadable, decrypt, encrypt, redacted
from netguard.ssrf import UnsafeAddress, UnsafeResponse, guarded_sync_client
from tools.base import ToolError

logger = logging.getLogger(__name__)

# A token this close to its expiry is refreshed before it is used, not after a refusal.
REFRESH_AHEAD = timedelta(seconds=60)
# Metadata, registrations and tokens are small; a server sending more is refused.
MAX_OAUTH_BYTES = 256 * 1024
# The most an error description from a server is quoted.
QUOTED_CHARS = 200
# Token endpoint errors that mean the grant (or Loop's client) is gone: only the person can
# mend it, by connecting again. Anything else (the network, a 5xx) is tried again next time.
GRANT_LOST = frozenset(
    {"invalid_grant", "invalid_client", "unauthorized_client", "invalid_scope", "access_denied"}
)
# Client authentication Loop can do at the token endpoint, in the order it prefers them: the
# SDK's own authorization server (behind many MCP servers) reads the secret only from the form
# at its revocation endpoint, so the form comes first.
AUTH_METHODS = ("client_secret_post", "client_secret_basic", "none")
_FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
_PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


class OAuthFailed(ToolError):
    """Connecting or refreshing did not work; the message says why (never with a credential)."""


class Unanswered(OAuthFailed):
    """A request sent whose answer did not come in time: the server may have acted on it."""


class NeedsReconnect(ToolError):
    """The person must connect the server again (no grant, or the grant was revoked)."""

    remedy = Remedy.RECONNECT


def needs_reconnect(server: McpServer, *, never: bool = False) -> NeedsReconnect:
    """The error that tells the person (and the model) what to do; never with a credential."""
    if never:
        return NeedsReconnect(
            f"{server.name} is not connected: open Settings → Tools and press Connect."
        )
    return NeedsReconnect(
        f"{server.name} needs reconnecting: open Settings → Tools and press Reconnect."
    )


@dataclass(frozen=True)
class Discovered:
    """Where a server's tokens come from, and what to ask them for."""

    metadata: OAuthMetadata
    resource: str
    scope: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "metadata": self.metadata.model_dump(mode="json", exclude_none=True),
            "resource": self.resource,
            "scope": self.scope,
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> "Discovered":
        return cls(
            OAuthMetadata.model_validate(stored["metadata"]), stored["resource"], stored["scope"]
        )


# ---------------------------------------------------------------------------------------------
# Connecting


def start(server: McpServer, user: User, redirect_uri: str) -> str:
    """The URL to send `user`'s browser to, to authorize Loop for `server`; the flow's state,
    PKCE verifier and client are kept on their connection (pending) for `finish`."""
    _check_connectable(server, user)
    existing = McpConnection.objects.filter(user=user, server=server).first()
    with _http(server) as http:
        found = _discover(http, server)
        client = _client(http, server, found, existing, redirect_uri)
    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    McpConnection.objects.update_or_create(
        user=user,
        server=server,
        defaults={
            "state": PENDING,
            "authorization_server": found.as_json(),
            "sealed_client": encrypt(client.model_dump_json(exclude_none=True)),
            "sealed_tokens": "",
            "expires_at": None,
            "refreshed_at": None,
            "unanswered_at": None,
            "flow_state": _hashed(state),
            "sealed_verifier": encrypt(pkce.code_verifier),
            "last_error": "",
        },
    )
    query = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
        "resource": found.resource,
    }
    if found.scope:
        query["scope"] = found.scope
    return _with_query(str(found.metadata.authorization_endpoint), query)


def finish(
    user: User, state: str, code: str, redirect_uri: str, *, iss: str | None = None
) -> McpServer:
    """Complete the flow `start` began for `user`: the code exchanged for tokens, stored sealed.

    The state must be one issued to this person and not yet used (another person's, or a
    replayed one, finds nothing); `iss`, when the browser brought it back (RFC 9207), must name
    the authorization server the flow was started with."""
    pending = McpConnection.objects.filter(
        user=user, state=PENDING, flow_state=_hashed(state or "")
    ).select_related("server")
    found = pending.first()
    # Used once: whoever clears the state first finishes the flow.
    if not state or found is None or not pending.filter(pk=found.pk).update(flow_state=""):
        raise OAuthFailed(
            "This sign-in is not one Loop started for you, or it was already finished; "
            "open Settings → Tools and press Connect again."
        )
    server: McpServer = found.server
    try:
        tokens = _exchange_code(found, code, redirect_uri, iss)
    except OAuthFailed as failed:
        McpConnection.objects.filter(pk=found.pk).update(
            state=RECONNECT, sealed_verifier="", last_error=str(failed)
        )
        raise
    now = timezone.now()
    McpConnection.objects.filter(pk=found.pk).update(
        state=CONNECTED,
        sealed_tokens=_sealed(tokens),
        expires_at=_expiry(tokens, now),
        refreshed_at=now,
        sealed_verifier="",
        last_error="",
    )
    logger.info("User %s connected %s by OAuth", user.pk, server.name)
    return server


def abandon(user: User, state: str) -> McpServer | None:
    """The browser came back with the authorization server's refusal: the flow `state` names,
    if it is `user`'s and in progress, ends (its state used once, as `finish` would). Its
    server, or None when no sign-in of theirs was in progress: the refusal's words are then
    anyone's (a link can carry any text), not the server's."""
    pending = McpConnection.objects.filter(
        user=user, state=PENDING, flow_state=_hashed(state or "")
    ).select_related("server")
    found = pending.first()
    if not state or found is None:
        return None
    if not pending.filter(pk=found.pk).update(flow_state="", sealed_verifier=""):
        return None
    server: McpServer = found.server
    return server


def disconnect(server: McpServer, user: User) -> None:
    """Forget `user`'s connection to `server`: its tokens and client are deleted. The grant is
    revoked at the authorization server too when it offers that (RFC 7009), as a courtesy: a
    failure there does not keep the tokens here."""
    found = McpConnection.objects.filter(user=user, server=server).first()
    if found is None:
        return
    found.delete()
    _revoke(server, found)


# ---------------------------------------------------------------------------------------------
# Using: the bearer token, refreshed one at a time per (person, server)

# The token each thread last handed out per (server, person), as a digest: what a 401 refused.
_handed = threading.local()


def bearer_for(server: McpServer, user: User | None) -> str:
    """`user`'s current access token for `server`, refreshed first if it expires within a
    minute; NeedsReconnect when there is no usable grant."""
    if user is None:
        raise needs_reconnect(server, never=True)
    found = _connection(server, user)
    token = _tokens(found).access_token
    if _due(found):
        token = _refreshed(server, user, seen=token, force=False)
    _remember(server, user, token)
    return token


def refresh_after_refusal(server: McpServer, user: User | None, refused: str | None = None) -> None:
    """After `server` answered 401 to `refused` (by default, the token this thread last had
    from `bearer_for`): refresh once, unless another process already replaced that token."""
    if user is None:
        raise needs_reconnect(server, never=True)
    found = _connection(server, user)
    current = _tokens(found).access_token
    seen = _digest(refused) if refused is not None else _remembered(server, user)
    if seen is not None and seen != _digest(current):
        return  # refreshed elsewhere since that token was read: the next call uses the new one
    _refreshed(server, user, seen=current, force=True)


def _connection(server: McpServer, user: User) -> McpConnection:
    found: McpConnection | None = McpConnection.objects.filter(user=user, server=server).first()
    if found is None or found.state == PENDING:
        raise needs_reconnect(server, never=True)
    if found.state != CONNECTED:
        raise needs_reconnect(server)
    return found


def _refreshed(server: McpServer, user: User, *, seen: str, force: bool) -> str:
    """The access token after one refresh: this process's, made under the row's lock, or the
    one another process made while this one waited for the lock."""
    if connection.in_atomic_block:
        # The caller's transaction may yet roll back, and the rotated refresh token with it (the
        # old one is dead by then): the refresh commits on a connection of its own.
        with ThreadPoolExecutor(1, thread_name_prefix="oauth-refresh") as apart:
            outcome = apart.submit(_refresh_apart, server, user, seen, force).result()
    else:
        outcome = _refresh_locked(server, user, seen=seen, force=force)
    if isinstance(outcome, ToolError):
        raise outcome  # after the commit: the connection's mark (reconnect, unanswered) stays
    return outcome


def _refresh_apart(server: McpServer, user: User, seen: str, force: bool) -> str | ToolError:
    try:
        return _refresh_locked(server, user, seen=seen, force=force)
    finally:
        connection.close()  # this thread's own connection


def _refresh_locked(server: McpServer, user: User, *, seen: str, force: bool) -> str | ToolError:
    with transaction.atomic(), _lock_wait_bounded(server):
        found: McpConnection | None = (
            McpConnection.objects.select_for_update().filter(user=user, server=server).first()
        )
        if found is None or found.state != CONNECTED:
            return needs_reconnect(server, never=found is None or found.state == PENDING)
        tokens = _tokens(found)
        if tokens.access_token != seen or not (force or _due(found)):
            return tokens.access_token  # another process refreshed while this one waited
        try:
            fresh = _refresh_grant(server, found, tokens)
        except _GrantLost as error:
            found.state, found.last_error = RECONNECT, str(error)
            found.save(update_fields=["state", "last_error", "updated_at"])
            logger.info("User %s must reconnect %s: %s", user.pk, server.name, error)
            return needs_reconnect(server)
        except Unanswered as unanswered:
            # Tried again next time; if the server did rotate meanwhile, that try presents a
            # token it replaced, and the grant ends: the person is told why (unanswered_at).
            found.unanswered_at, found.last_error = timezone.now(), str(unanswered)
            found.save(update_fields=["unanswered_at", "last_error", "updated_at"])
            return unanswered
        now = timezone.now()
        found.sealed_tokens = _sealed(fresh)  # the rotated refresh token, before the lock goes
        found.expires_at = _expiry(fresh, now)
        found.refreshed_at = now
        found.last_error = ""
        found.unanswered_at = None
        found.save(
            update_fields=[
                "sealed_tokens",
                "expires_at",
                "refreshed_at",
                "last_error",
                "unanswered_at",
                "updated_at",
            ]
        )
        logger.info("Refreshed user %s's OAuth token for %s", user.pk, server.name)
        return fresh.access_token


@contextmanager
def _lock_wait_bounded(server: McpServer) -> Iterator[None]:
    """No wait for the row lock longer than a refresh can take (each holder's request has its
    deadline), so a stuck database never stacks up every run of a person."""
    seconds = int(2 * _seconds() + 10)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{seconds * 1000}ms"])
    try:
        yield
    except OperationalError as error:
        if not isinstance(error.__cause__, LockNotAvailable):
            raise
        raise OAuthFailed(
            f"{server.name}: another refresh of this connection took too long; try again."
        ) from None


class _GrantLost(Exception):
    """The authorization server refused the grant: only connecting again mends it."""


def _refresh_grant(server: McpServer, found: McpConnection, tokens: OAuthToken) -> OAuthToken:
    if not tokens.refresh_token:
        raise _GrantLost(f"{server.name} gave no refresh token, and the access token expired")
    try:
        discovered = Discovered.from_json(found.authorization_server)
        client = _stored_client(found)
    except (OAuthFailed, KeyError, TypeError, ValidationError):
        raise _GrantLost("Loop's record of this connection could not be read") from None
    form = {
        "grant_type": "refresh_token",
        "refresh_token": tokens.refresh_token,
        "resource": discovered.resource,
    }
    with _http(server) as http:
        answer = _token_request(http, server, discovered.metadata, client, form)
    # RFC 6749 §6: a server that does not rotate leaves the refresh token (and scope) as it was.
    return answer.model_copy(
        update={
            "refresh_token": answer.refresh_token or tokens.refresh_token,
            "scope": answer.scope or tokens.scope,
        }
    )


def _due(found: McpConnection) -> bool:
    return found.expires_at is not None and found.expires_at <= timezone.now() + REFRESH_AHEAD


def _expiry(tokens: OAuthToken, now: datetime) -> datetime | None:
    return None if tokens.expires_in is None else now + timedelta(seconds=int(tokens.expires_in))


def _tokens(found: McpConnection) -> OAuthToken:
    try:
        return OAuthToken.model_validate_json(decrypt(found.sealed_tokens))
    except (CredentialUnreadable, ValidationError):
        McpConnection.objects.filter(pk=found.pk).update(
            state=RECONNECT, last_error="The stored tokens could not be read; connect again."
        )
        raise needs_reconnect(found.server) from None


def _sealed(tokens: OAuthToken) -> str:
    return encrypt(tokens.model_dump_json(exclude_none=True))


def _remember(server: McpServer, user: User, token: str) -> None:
    handed: dict[tuple[int, Any], str] = _handed.__dict__.setdefault("tokens", {})
    handed[(server.pk, user.pk)] = _digest(token)


def _remembered(server: McpServer, user: User) -> str | None:
    handed: dict[tuple[int, Any], str] = _handed.__dict__.get("tokens", {})
    return handed.get((server.pk, user.pk))


# ---------------------------------------------------------------------------------------------
# Discovery and registration


def _check_connectable(server: McpServer, user: User) -> None:
    if server.owner_id is not None and server.owner_id != user.pk:
        raise OAuthFailed("That server is not yours to connect.")
    if server.auth != OAUTH or not server.url:
        raise OAuthFailed(f"{server.name} is not set up for OAuth.")
    if not server.enabled:
        raise OAuthFailed(f"{server.name} is turned off.")


def _discover(http: httpx2.Client, server: McpServer) -> Discovered:
    """The authorization server's metadata, the resource to ask tokens for and the scope,
    as the MCP authorization spec finds them (the server's 401 first, then well-known URLs)."""
    hinted, challenged_scope = _challenge(http, server.url)
    canonical = resource_url_from_server_url(server.url)
    protected = _first_found(
        http,
        build_protected_resource_metadata_discovery_urls(hinted, server.url),
        ProtectedResourceMetadata,
    )
    if protected is None:  # the 2025-03-26 way: the authorization server on the same origin
        issuer = None
        resource = canonical
    else:
        if not check_resource_allowed(canonical, str(protected.resource)):
            raise OAuthFailed(
                f"{server.name}'s metadata names another resource ({protected.resource}); "
                "Loop does not ask tokens for it"
            )
        issuer = str(protected.authorization_servers[0])
        resource = str(protected.resource)
    metadata = _first_found(
        http,
        build_oauth_authorization_server_metadata_discovery_urls(issuer, server.url),
        OAuthMetadata,
    )
    if metadata is None:
        raise OAuthFailed(f"{server.name}'s authorization server publishes no OAuth metadata")
    if issuer is not None and not issuers_match(str(metadata.issuer), issuer):
        raise OAuthFailed(
            f"{server.name}'s authorization server calls itself {metadata.issuer}, not {issuer}"
        )
    if "S256" not in (metadata.code_challenge_methods_supported or []):
        raise OAuthFailed(
            f"{server.name}'s authorization server does not offer PKCE (S256), which Loop requires"
        )
    scope = get_client_metadata_scopes(challenged_scope, protected, metadata, ["refresh_token"])
    return Discovered(metadata, resource, scope)


def _challenge(http: httpx2.Client, url: str) -> tuple[str | None, str | None]:
    """The resource metadata URL and scope the server's 401 names, if it says any."""
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        with http.stream("POST", url, json=_PING, headers=headers) as response:
            if response.status_code not in (401, 403):
                return None, None
            return (
                extract_resource_metadata_from_www_auth(response),
                extract_scope_from_www_auth(response),
            )
    except (httpx2.HTTPError, UnsafeResponse):
        return None, None  # the well-known URLs are tried next, and say what is wrong


Document = TypeVar("Document", ProtectedResourceMetadata, OAuthMetadata)


def _first_found(http: httpx2.Client, urls: list[str], model: type[Document]) -> Document | None:
    """The first of `urls` that answers a valid document, or None; a server error stops."""
    for url in urls:
        response = http.get(url, headers={"Accept": "application/json"})
        if response.status_code >= 500:
            raise OAuthFailed(f"{_shown(url)} answered HTTP {response.status_code}")
        if response.status_code != 200:
            continue
        try:
            return model.model_validate_json(response.content)
        except ValidationError:
            continue
    return None


def _client(
    http: httpx2.Client,
    server: McpServer,
    found: Discovered,
    existing: McpConnection | None,
    redirect_uri: str,
) -> OAuthClientInformationFull:
    """Loop's client at the authorization server: the one registered before, if it is still
    for this issuer and this redirect URI, else a new registration."""
    issuer = str(found.metadata.issuer)
    if existing is not None and existing.sealed_client:
        try:
            client = _stored_client(existing)
        except OAuthFailed:
            client = None
        if client is not None and _reusable(client, issuer, redirect_uri):
            return client
    if found.metadata.registration_endpoint is None:
        raise OAuthFailed(
            f"{server.name}'s authorization server does not let Loop register itself "
            "(no dynamic client registration)"
        )
    return _register(http, server, found, redirect_uri)


def _reusable(client: OAuthClientInformationFull, issuer: str, redirect_uri: str) -> bool:
    registered = [str(uri) for uri in client.redirect_uris or []]
    return (
        client.issuer is not None
        and issuers_match(client.issuer, issuer)
        and redirect_uri in registered
        and not _secret_expired(client)
    )


def _secret_expired(client: OAuthClientInformationFull) -> bool:
    expires = client.client_secret_expires_at  # 0: never
    return expires is not None and expires != 0 and expires <= timezone.now().timestamp() + 60


def _register(
    http: httpx2.Client, server: McpServer, found: Discovered, redirect_uri: str
) -> OAuthClientInformationFull:
    """RFC 7591: Loop registers as a web client with this one redirect URI."""
    supported = found.metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
    method = next((method for method in AUTH_METHODS if method in supported), None)
    if method is None:
        raise OAuthFailed(
            f"{server.name}'s authorization server offers no client authentication Loop can do"
        )
    request = OAuthClientMetadata.model_validate(
        {
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": method,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "client_name": "Loop",
            "scope": found.scope,
            "application_type": "web",
        }
    )
    response = http.post(
        str(found.metadata.registration_endpoint),
        json=request.model_dump(mode="json", exclude_none=True),
    )
    if response.status_code not in (200, 201):
        raise OAuthFailed(
            f"{server.name}'s authorization server refused Loop's registration: "
            + _refusal(response, secrets=())
        )
    try:
        client = OAuthClientInformationFull.model_validate_json(response.content)
    except ValidationError:
        raise OAuthFailed(
            f"{server.name}'s authorization server answered the registration with no client"
        ) from None
    method = client.token_endpoint_auth_method
    if method not in (*AUTH_METHODS, None) or (
        method in ("client_secret_basic", "client_secret_post") and not client.client_secret
    ):
        raise OAuthFailed(
            f"{server.name}'s authorization server registered Loop for client authentication "
            f"it cannot do ({client.token_endpoint_auth_method})"
        )
    return client.model_copy(update={"issuer": str(found.metadata.issuer)})


def _stored_client(found: McpConnection) -> OAuthClientInformationFull:
    try:
        return OAuthClientInformationFull.model_validate_json(decrypt(found.sealed_client))
    except (CredentialUnreadable, ValidationError):
        raise OAuthFailed("Loop's registration with the server could not be read") from None


# ---------------------------------------------------------------------------------------------
# The token endpoint


def _exchange_code(
    found: McpConnection, code: str, redirect_uri: str, iss: str | None
) -> OAuthToken:
    server = found.server
    if not code:
        raise OAuthFailed(f"{server.name}'s authorization server sent no code back")
    try:
        discovered = Discovered.from_json(found.authorization_server)
        verifier = decrypt(found.sealed_verifier)
    except (CredentialUnreadable, KeyError, TypeError, ValidationError):
        raise OAuthFailed("The sign-in could not be read back; press Connect again.") from None
    if iss is not None and iss != str(discovered.metadata.issuer):
        raise OAuthFailed(
            f"The sign-in came back from {iss}, not from {server.name}'s authorization server"
        )
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "resource": discovered.resource,
    }
    with _http(server) as http:
        try:
            return _token_request(http, server, discovered.metadata, _stored_client(found), form)
        except _GrantLost as refused:
            raise OAuthFailed(str(refused)) from None


def _token_request(
    http: httpx2.Client,
    server: McpServer,
    metadata: OAuthMetadata,
    client: OAuthClientInformationFull,
    form: dict[str, str],
) -> OAuthToken:
    """POST to the token endpoint with Loop's client authentication; the tokens, or
    _GrantLost when the server refuses the grant, or OAuthFailed for anything else."""
    form, headers = _authenticated(client, form)
    response = http.post(str(metadata.token_endpoint), data=form, headers=headers)
    hidden = (*form.values(), client.client_secret or "")
    if response.status_code == 200:
        try:
            return OAuthToken.model_validate_json(response.content)
        except ValidationError:
            raise OAuthFailed(
                f"{server.name}'s authorization server answered with no usable bearer token"
            ) from None
    error = _error_code(response)
    refusal = f"{server.name}'s authorization server refused: " + _refusal(response, hidden)
    if error in GRANT_LOST or (error is None and response.status_code in (400, 401)):
        raise _GrantLost(refusal)
    raise OAuthFailed(refusal)


def _authenticated(
    client: OAuthClientInformationFull, form: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """The form and headers with Loop's client authentication (RFC 6749 §2.3.1)."""
    headers = dict(_FORM)
    # client_id in the form whatever the method: servers look the client up by it first.
    form = {**form, "client_id": client.client_id}
    method = client.token_endpoint_auth_method
    secret = client.client_secret
    if method == "client_secret_post" and secret:
        return {**form, "client_secret": secret}, headers
    if method in ("client_secret_basic", None) and secret:
        pair = f"{quote(client.client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return form, headers


def _revoke(server: McpServer, found: McpConnection) -> None:
    """RFC 7009: ask the authorization server to forget the grant; best effort."""
    try:
        endpoint = Discovered.from_json(found.authorization_server).metadata.revocation_endpoint
        if endpoint is None or not found.sealed_tokens:
            return
        tokens = OAuthToken.model_validate_json(decrypt(found.sealed_tokens))
        client = _stored_client(found)
        token, hint = (
            (tokens.refresh_token, "refresh_token")
            if tokens.refresh_token
            else (tokens.access_token, "access_token")
        )
        form, headers = _authenticated(client, {"token": token, "token_type_hint": hint})
        with _http(server) as http:
            http.post(str(endpoint), data=form, headers=headers)
    except (OAuthFailed, CredentialUnreadable, KeyError, TypeError, ValidationError) as error:
        logger.info("Could not revoke a grant at %s: %s", server.name, type(error).__name__)


# ---------------------------------------------------------------------------------------------
# HTTP


@contextmanager
def _http(server: McpServer) -> Iterator[httpx2.Client]:
    """A guarded client for `server`'s OAuth requests; what goes wrong on the wire becomes an
    OAuthFailed that says what (the guard's messages carry no query string, so no secret)."""
    client = guarded_sync_client(
        headers={"Accept": "application/json"},
        timeout=_seconds(),
        allowed=private_networks(),
        max_response_bytes=MAX_OAUTH_BYTES,
        # The metadata, registration, token and revocation URLs are the server's (or its
        # authorization server's) to name: only the operator's declared host is theirs to trust.
        own_host=own_host_of(server),
    )
    try:
        with client:
            yield client
    except (UnsafeAddress, UnsafeResponse) as error:
        raise OAuthFailed(f"{server.name}: {error}") from None
    except httpx2.ReadTimeout:  # sent: the server may have acted on it
        raise Unanswered(
            f"{server.name}'s authorization server did not answer within {_seconds():g} seconds"
        ) from None
    except httpx2.TimeoutException:
        raise OAuthFailed(
            f"{server.name}'s authorization server did not answer within {_seconds():g} seconds"
        ) from None
    except httpx2.HTTPError as error:
        raise OAuthFailed(
            f"{server.name}'s authorization server could not be reached ({type(error).__name__})"
        ) from None


def _seconds() -> float:
    return float(settings.LOOP_MCP_DISCOVERY_SECONDS)


def _error_code(response: httpx2.Response) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) else None


def _refusal(response: httpx2.Response, secrets: tuple[str, ...]) -> str:
    """The server's OAuth error, quoted short, with anything Loop sent it blanked out."""
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}"
    said = " ".join(
        str(body[key]) for key in ("error", "error_description") if isinstance(body.get(key), str)
    )
    said = " ".join(redacted(said, secrets).split())[:QUOTED_CHARS]
    return f"{said} (HTTP {response.status_code})" if said else f"HTTP {response.status_code}"


def _with_query(url: str, query: dict[str, str]) -> str:
    parts = urlsplit(url)
    joined = "&".join(part for part in (parts.query, urlencode(query)) if part)
    return urlunsplit(parts._replace(query=joined))


def _shown(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(query="", fragment=""))


def _hashed(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
