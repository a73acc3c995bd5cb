"""A small OAuth 2.1 authorization server for Loop's tests, run as a subprocess on 127.0.0.1 that
prints `PORT <n>` once it accepts connections:

    python -m tests.mcp_servers.oauth_server --port 0 [--access-seconds 3600]
        [--registration-endpoint URL]

Its endpoints are the official SDK's (`mcp.server.auth.routes.create_auth_routes`), so requests
are checked as the SDK checks them; the provider behind them is this module's and behaves as
real authorization servers do:

- RFC 8414 metadata at /.well-known/oauth-authorization-server (issuer `http://127.0.0.1:<n>`,
  with the introspection endpoint and RFC 9207 `iss` in authorization responses);
- RFC 7591 dynamic client registration at /register (scope `mcp` unless asked otherwise);
  `--registration-endpoint` names another URL for it in the metadata (a document that points
  Loop at some other server);
- /authorize: authorization code with PKCE S256 (required); the person approves at once: a 302 to
  the redirect_uri with `code`, `state` and `iss` (or `error=access_denied` after /admin/deny);
- /token: `authorization_code` and `refresh_token` grants. A code is single use (a second use
  revokes the grant it made). Refresh tokens rotate: each refresh answers a new refresh token and
  the old one is dead; presenting a dead one revokes the whole grant (its access tokens and its
  live refresh token), as reuse detection does. Access tokens live `--access-seconds`;
- /introspect (RFC 7662) for the MCP server (tests/mcp_servers/app.py `--auth oauth`), which
  answers `aud` = the RFC 8707 `resource` the client asked the token for;
- /revoke (RFC 7009), /admin/revoke (every grant), /admin/expire (every access token now expired,
  so a test needs no clock), /admin/deny (`{"deny": true}`: /authorize refuses from now on),
  /admin/hold-refresh (`{"seconds": N}`: the next refresh is made, its new tokens stored, and
  its answer held N seconds: a client that gives up sooner never learns them),
  /admin/stats (JSON counts: `token_requests` by grant type, `token_failures` by grant type,
  `registrations`, `authorizations`, `introspections`, `reuse_detected`, `grants`,
  `held_answers`: refresh answers held, counted once their tokens were made).
"""

import argparse
import json
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, cors_middleware, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.mcp_servers import HOST, run_until_stopped

SCOPE = "mcp"
SUBJECT = "test-person"
CODE_SECONDS = 300
METADATA_PATH = "/.well-known/oauth-authorization-server"


@dataclass
class Grant:
    """What one authorization made: the refresh token alive now, and whether it still holds."""

    id: str
    client_id: str
    scopes: list[str]
    resource: str | None
    refresh_token: str
    revoked: bool = False


@dataclass
class Issued:
    grant_id: str
    expires_at: int


@dataclass
class Provider:
    """The SDK's `OAuthAuthorizationServerProvider`, in memory, rotating refresh tokens and
    detecting their reuse."""

    issuer: str
    access_seconds: int
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    used_codes: dict[str, str] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)
    access_tokens: dict[str, Issued] = field(default_factory=dict)
    refresh_tokens: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    deny: bool = False
    # Seconds the next refresh's answer is held once its tokens are made (0: none).
    hold_refresh: float = 0.0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.counts["registrations"] += 1

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        """The person approves at once (or, after /admin/deny, refuses)."""
        self.counts["authorizations"] += 1
        if self.deny:
            raise AuthorizeError("access_denied", "the person refused")
        assert client.client_id is not None
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or (client.scope or SCOPE).split(),
            expires_at=time.time() + CODE_SECONDS,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=SUBJECT,
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        if authorization_code in self.used_codes:
            self.revoke_grant(self.used_codes[authorization_code])
            return None
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        grant = Grant(
            id=secrets.token_hex(8),
            client_id=authorization_code.client_id,
            scopes=authorization_code.scopes,
            resource=authorization_code.resource,
            refresh_token="",
        )
        self.grants[grant.id] = grant
        self.used_codes[authorization_code.code] = grant.id
        return self.issue(grant)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        grant = self.grants.get(self.refresh_tokens.get(refresh_token, ""))
        if grant is None or grant.revoked:
            return None
        if refresh_token != grant.refresh_token:
            self.counts["reuse_detected"] += 1
            self.revoke_grant(grant.id)
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=grant.client_id,
            scopes=grant.scopes,
            resource=grant.resource,
            subject=SUBJECT,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        grant = self.grants[self.refresh_tokens[refresh_token.token]]
        if grant.revoked or refresh_token.token != grant.refresh_token:
            raise TokenError("invalid_grant", "refresh token was already used")
        return self.issue(grant, scopes)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "only authorization_code and refresh_token")

    def issue(self, grant: Grant, scopes: list[str] | None = None) -> OAuthToken:
        """A new access token and a new refresh token; the grant's previous refresh token dies."""
        access = secrets.token_urlsafe(32)
        refresh = secrets.token_urlsafe(32)
        self.access_tokens[access] = Issued(grant.id, int(time.time()) + self.access_seconds)
        self.refresh_tokens[refresh] = grant.id
        grant.refresh_token = refresh
        return OAuthToken(
            access_token=access,
            expires_in=self.access_seconds,
            scope=" ".join(scopes or grant.scopes),
            refresh_token=refresh,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        issued = self.access_tokens.get(token)
        if issued is None or issued.expires_at <= time.time():
            return None
        grant = self.grants[issued.grant_id]
        if grant.revoked:
            return None
        return AccessToken(
            token=token,
            client_id=grant.client_id,
            scopes=grant.scopes,
            expires_at=issued.expires_at,
            resource=grant.resource,
            subject=SUBJECT,
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        grant_id = self.refresh_tokens.get(token.token)
        if grant_id is None and token.token in self.access_tokens:
            grant_id = self.access_tokens[token.token].grant_id
        if grant_id is not None:
            self.revoke_grant(grant_id)

    def revoke_grant(self, grant_id: str) -> None:
        self.grants[grant_id].revoked = True

    def revoke_all(self) -> None:
        for grant in self.grants.values():
            grant.revoked = True

    def expire_all(self) -> None:
        expired = int(time.time()) - 1
        for issued in self.access_tokens.values():
            issued.expires_at = expired

    def stats(self) -> dict[str, Any]:
        revoked = sum(grant.revoked for grant in self.grants.values())
        return {
            "token_requests": _prefixed(self.counts, "token_request:"),
            "token_failures": _prefixed(self.counts, "token_failure:"),
            "registrations": self.counts["registrations"],
            "authorizations": self.counts["authorizations"],
            "introspections": self.counts["introspections"],
            "reuse_detected": self.counts["reuse_detected"],
            "held_answers": self.counts["held_answers"],
            "grants": {"active": len(self.grants) - revoked, "revoked": revoked},
        }


def _prefixed(counts: Counter[str], prefix: str) -> dict[str, int]:
    return {key.removeprefix(prefix): n for key, n in counts.items() if key.startswith(prefix)}


class CountTokenRequests:
    """Counts every request to /token by its grant type, and those refused, whatever the SDK's
    handler then decides: the tests' "fifty runs made one refresh request"."""

    def __init__(self, app: ASGIApp, provider: Provider) -> None:
        self.app = app
        self.provider = provider
        self.counts = provider.counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        form = parse_qs(body.decode("latin-1"))
        grant_type = form.get("grant_type", ["(none)"])[0]
        self.counts[f"token_request:{grant_type}"] += 1
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        hold = self.provider.hold_refresh if grant_type == "refresh_token" else 0.0
        if hold:
            self.provider.hold_refresh = 0.0

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.counts[f"token_failure:{grant_type}"] += 1
            if message["type"] == "http.response.start" and hold:
                self.counts["held_answers"] += 1  # its tokens are made and stored by now
                await anyio.sleep(hold)
            await send(message)

        await self.app(scope, replay, watch)


def oauth_app(port: int, access_seconds: int, registration_endpoint: str | None = None) -> ASGIApp:
    issuer = f"http://{HOST}:{port}"
    provider = Provider(issuer=issuer, access_seconds=access_seconds)
    registration = ClientRegistrationOptions(
        enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
    )
    revocation = RevocationOptions(enabled=True)
    issuer_url = AnyHttpUrl(issuer)
    routes: list[BaseRoute] = [
        route
        for route in create_auth_routes(
            provider,
            issuer_url,
            client_registration_options=registration,
            revocation_options=revocation,
        )
        if route.path != METADATA_PATH
    ]
    built = build_metadata(issuer_url, None, registration, revocation)
    # Validated again from text: a parsed URL would add a trailing slash to the issuer, and
    # RFC 8414 compares issuers as exact strings (the `iss` of RFC 9207 among them).
    metadata = OAuthMetadata.model_validate(
        {
            **built.model_dump(mode="json", exclude_none=True),
            "issuer": issuer,
            "introspection_endpoint": f"{issuer}/introspect",
            "registration_endpoint": registration_endpoint or f"{issuer}/register",
            "authorization_response_iss_parameter_supported": True,
            "token_endpoint_auth_methods_supported": [
                "client_secret_post",
                "client_secret_basic",
                "none",
            ],
        }
    )
    routes.append(
        Route(
            METADATA_PATH,
            endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        )
    )

    async def introspect(request: Request) -> Response:
        provider.counts["introspections"] += 1
        form = await request.form()
        token = await provider.load_access_token(str(form.get("token", "")))
        if token is None:
            return JSONResponse({"active": False})
        found = {
            "active": True,
            "client_id": token.client_id,
            "scope": " ".join(token.scopes),
            "exp": token.expires_at,
            "sub": token.subject,
            "iss": issuer,
            "token_type": "Bearer",
        }
        if token.resource is not None:
            found["aud"] = token.resource
        return JSONResponse(found)

    async def revoke_all(request: Request) -> Response:
        provider.revoke_all()
        return JSONResponse(provider.stats())

    async def expire_all(request: Request) -> Response:
        provider.expire_all()
        return JSONResponse(provider.stats())

    async def deny(request: Request) -> Response:
        body = await request.body()
        provider.deny = bool(json.loads(body or b"{}").get("deny", True))
        return JSONResponse({"deny": provider.deny})

    async def hold_refresh(request: Request) -> Response:
        provider.hold_refresh = float(json.loads(await request.body() or b"{}")["seconds"])
        return JSONResponse({"hold_refresh": provider.hold_refresh})

    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats())

    routes += [
        Route("/introspect", introspect, methods=["POST"]),
        Route("/admin/revoke", revoke_all, methods=["POST"]),
        Route("/admin/expire", expire_all, methods=["POST"]),
        Route("/admin/deny", deny, methods=["POST"]),
        Route("/admin/hold-refresh", hold_refresh, methods=["POST"]),
        Route("/admin/stats", stats, methods=["GET"]),
    ]
    return CountTokenRequests(Starlette(routes=routes), provider)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--access-seconds", type=int, default=3600)
    parser.add_argument("--registration-endpoint")
    args = parser.parse_args(argv)
    run_until_stopped(
        lambda port: oauth_app(port, args.access_seconds, args.registration_endpoint), args.port
    )


if __name__ == "__main__":
    main()
