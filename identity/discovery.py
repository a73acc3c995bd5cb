"""The provider as its discovery document describes it: where to send a person to sign in, where
to trade a code or a refresh token, where its keys are, and which algorithms sign its ID tokens.

Read once per process from `{LOOP_OIDC_ISSUER}/.well-known/openid-configuration` (with a
timeout), and refused unless the document names the configured issuer: a document served for
another issuer would let that one's tokens in. The keys (JWKS) are read again when a token names
a key the process has not seen, which is how a provider's key rotation reaches Loop."""

import logging
import threading
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

logger = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/openid-configuration"
# Algorithms that sign with a private key and verify with a public one. "none" and the HS family
# (a shared secret) are never accepted: a public key used as an HMAC secret forges any token.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class DiscoveryError(Exception):
    """The provider's discovery document or keys could not be had or are not fit to use; the
    message says which and what to check."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str
    signing_algorithms: tuple[str, ...]


_lock = threading.Lock()
_provider: dict[str, Provider] = {}
_keys: dict[str, dict[str, Any]] = {}


def provider() -> Provider:
    """The configured provider, discovered at the first call of the process."""
    issuer = settings.LOOP_OIDC_ISSUER
    with _lock:
        if issuer not in _provider:
            _provider[issuer] = discover(issuer)
        return _provider[issuer]


def forget() -> None:
    """Read the document and keys afresh at the next use (tests; a provider that moved)."""
    with _lock:
        _provider.clear()
        _keys.clear()


def fetch_json(url: str, what: str) -> dict[str, Any]:
    try:
        response = requests.get(url, timeout=settings.LOOP_OIDC_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except requests.RequestException as error:
        raise DiscoveryError(f"Could not read the provider's {what} at {url}: {error}") from None
    except ValueError:
        raise DiscoveryError(f"The provider's {what} at {url} is not JSON.") from None
    if not isinstance(document, dict):
        raise DiscoveryError(f"The provider's {what} at {url} is not a JSON object.")
    return document


def discover(issuer: str) -> Provider:
    url = issuer + WELL_KNOWN
    document = fetch_json(url, "discovery document")
    if document.get("issuer") != issuer:
        raise DiscoveryError(
            f"The discovery document at {url} names the issuer {document.get('issuer')!r}, not "
            f"{issuer!r}: set LOOP_OIDC_ISSUER to exactly the issuer the provider states."
        )
    missing = [
        name
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if not isinstance(document.get(name), str)
    ]
    if missing:
        raise DiscoveryError(f"The discovery document at {url} lacks {', '.join(missing)}.")
    offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    algorithms = tuple(alg for alg in offered if alg in ASYMMETRIC_ALGORITHMS)
    if not algorithms:
        raise DiscoveryError(
            f"The provider signs ID tokens only with {offered}; Loop accepts public-key "
            f"signatures only ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))})."
        )
    return Provider(
        issuer=issuer,
        authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"],
        userinfo_endpoint=str(document.get("userinfo_endpoint") or ""),
        jwks_uri=document["jwks_uri"],
        signing_algorithms=algorithms,
    )


def signing_key(kid: str | None, alg: str) -> dict[str, Any]:
    """The provider's public key (a JWK) of that id and algorithm; the key set is read again
    once when the id is unknown (the provider rotated its keys)."""
    jwks_uri = provider().jwks_uri
    for fresh in (False, True):
        with _lock:
            known = None if fresh else _keys.get(jwks_uri)
        if known is None:
            known = fetch_json(jwks_uri, "signing keys (JWKS)")
            with _lock:
                _keys[jwks_uri] = known
        found = matching_key(known, kid, alg)
        if found is not None:
            return found
    raise DiscoveryError(f"The provider's keys at {jwks_uri} hold no {alg} key {kid!r}.")


def matching_key(jwks: dict[str, Any], kid: str | None, alg: str) -> dict[str, Any] | None:
    keys = [key for key in jwks.get("keys", []) if isinstance(key, dict)]
    fitting = [
        key
        for key in keys
        if key.get("use", "sig") == "sig"
        and key.get("alg", alg) == alg
        and (kid is None or key.get("kid") == kid)
    ]
    return fitting[0] if len(fitting) == 1 or (fitting and kid is not None) else None
