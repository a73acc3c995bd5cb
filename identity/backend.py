"""Signing in through the provider: mozilla-django-oidc's backend (the code traded for tokens
with the PKCE verifier and client secret), with the endpoints from discovery and the ID token
verified in full: its signature against the provider's published keys with an algorithm the
provider announces (never "none", never a shared-secret HS one), its issuer, its audience (and
authorized party when there are several), its expiry and issue time, and the nonce this browser's
session sent. identity.signin then decides who that is here."""

import hmac
import logging
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from django.urls import reverse
from mozilla_django_oidc.auth import (  # type: ignore[import-untyped] # no types shipped
    OIDCAuthenticationBackend,
)
from mozilla_django_oidc.utils import absolutify  # type: ignore[import-untyped]

from identity import discovery
from identity.signin import admit

logger = logging.getLogger(__name__)

# Clocks differ a little between the provider and Loop.
LEEWAY_SECONDS = 60
REQUIRED_CLAIMS = ["iss", "aud", "sub", "exp", "iat"]


class TokenRefused(SuspiciousOperation):
    """The ID token (or the answer carrying it) is not one Loop can trust."""


def verify_id_token(token: str, nonce: str | None) -> dict[str, Any]:
    """The token's claims, once everything about it checks; TokenRefused says what did not."""
    provider = discovery.provider()
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise TokenRefused(f"The ID token cannot be read: {error}") from None
    alg = header.get("alg")
    if alg not in provider.signing_algorithms:
        raise TokenRefused(
            f"The ID token is signed with {alg!r}; the provider announces "
            f"{list(provider.signing_algorithms)} and Loop accepts no other."
        )
    key = jwt.PyJWK(discovery.signing_key(header.get("kid"), alg), algorithm=alg)
    client_id = settings.LOOP_OIDC_CLIENT_ID
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=client_id,
            issuer=provider.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": REQUIRED_CLAIMS},
        )
    except jwt.PyJWTError as error:
        raise TokenRefused(f"The ID token does not check: {error}") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise TokenRefused("The ID token names several audiences and another authorized party.")
    if not nonce or not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
        raise TokenRefused("The ID token's nonce is not the one this sign-in sent.")
    return claims


class ProviderBackend(OIDCAuthenticationBackend):  # type: ignore[misc] # untyped base
    """Made by Django at every authenticate() and for every signed-in request's get_user(), so
    its constructor reads no endpoint (discovery is the network); they are read when used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        ModelBackend.__init__(self, *args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.LOOP_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.LOOP_OIDC_CLIENT_SECRET
        self.UserModel = User

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return discovery.provider().token_endpoint

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return discovery.provider().userinfo_endpoint

    def authenticate(
        self,
        request: HttpRequest | None,
        nonce: str | None = None,
        code_verifier: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        """The callback's code traded and the person admitted; None when this is no callback
        (a password sign-in asks every backend)."""
        if request is None or code_verifier is None:
            return None
        code, state = request.GET.get("code"), request.GET.get("state")
        if not code or not state:
            return None
        self.request = request
        redirect_uri = absolutify(request, reverse("oidc_authentication_callback"))
        tokens = self.get_token(
            {
                "client_id": self.OIDC_RP_CLIENT_ID,
                "client_secret": self.OIDC_RP_CLIENT_SECRET,
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": code_verifier,
            }
        )
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise TokenRefused("The provider's token answer carries no ID token.")
        claims = verify_id_token(id_token, nonce)
        claims = claims | self.userinfo_claims(tokens, claims)
        return admit(claims, str(tokens.get("refresh_token") or ""))

    def userinfo_claims(self, tokens: dict[str, Any], claims: dict[str, Any]) -> dict[str, Any]:
        """The userinfo endpoint's claims (groups are often there only), for the same subject."""
        access_token = tokens.get("access_token")
        if not self.OIDC_OP_USER_ENDPOINT or not access_token:
            return {}
        info: dict[str, Any] = self.get_userinfo(access_token, None, claims)
        if info.get("sub") != claims["sub"]:
            raise TokenRefused("The userinfo answer is about another subject.")
        return info

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """A userinfo answered as a signed JWT is checked as strictly (no nonce there)."""
        raise TokenRefused("Signed userinfo answers are not accepted; ask for JSON.")

    def get_user(self, user_id: int) -> User | None:
        """Django's rule, not mozilla's: a deactivated account's sessions sign no one in."""
        return ModelBackend.get_user(self, user_id)
