"""The ID token's checks (identity.backend.verify_id_token), each driven directly against a
provider this module serves on 127.0.0.1 (a discovery document and a JWKS over real HTTP, in a
thread): a token is refused when it is forged (signed by another key), names another issuer or
audience, carries another nonce, has expired or lacks its times, is unsigned ("alg": "none"), or
is signed with HS256 using the provider's public key as the secret. The full sign-in through a
real provider is tests/test_browser_identity.py."""

import hashlib
import hmac as hmac_module
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from identity import discovery
from identity.backend import TokenRefused, verify_id_token

pytestmark = pytest.mark.fast

CLIENT_ID = "loop"
NONCE = "the nonce this browser's session sent"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


PROVIDER_KEY = rsa_key()
OTHER_KEY = rsa_key()


class FakeProvider(ThreadingHTTPServer):
    document: dict[str, Any]
    jwks: dict[str, Any]


class Handler(BaseHTTPRequestHandler):
    server: FakeProvider

    def do_GET(self) -> None:
        body = self.server.document if self.path.endswith("openid-configuration") else None
        body = self.server.jwks if self.path == "/jwks" else body
        payload = json.dumps(body).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


@pytest.fixture
def provider(settings) -> Iterator[FakeProvider]:
    server = FakeProvider(("127.0.0.1", 0), Handler)
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    server.document = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": f"{issuer}/token",
        "jwks_uri": f"{issuer}/jwks",
        "id_token_signing_alg_values_supported": ["RS256", "HS256", "none"],
    }
    server.jwks = {"keys": [public_jwk(PROVIDER_KEY, "k1")]}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.LOOP_OIDC_ISSUER = issuer
    settings.LOOP_OIDC_CLIENT_ID = CLIENT_ID
    discovery.forget()
    yield server
    discovery.forget()
    server.shutdown()
    server.server_close()


def claims(provider: FakeProvider, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {
        "iss": provider.document["issuer"],
        "aud": CLIENT_ID,
        "sub": "alice-0001",
        "iat": now,
        "exp": now + 300,
        "nonce": NONCE,
    }
    return {key: value for key, value in (base | changes).items() if value is not None}


def signed(payload: dict[str, Any], key: Any = PROVIDER_KEY, kid: str = "k1", alg: str = "RS256"):
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


def test_a_token_the_provider_signed_for_this_client_passes(provider):
    assert verify_id_token(signed(claims(provider)), NONCE)["sub"] == "alice-0001"


def test_several_audiences_pass_only_with_this_client_as_authorized_party(provider):
    both = claims(provider, aud=[CLIENT_ID, "another"])
    assert verify_id_token(signed(both | {"azp": CLIENT_ID}), NONCE)["sub"] == "alice-0001"
    with pytest.raises(TokenRefused, match="authorized party"):
        verify_id_token(signed(both | {"azp": "another"}), NONCE)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"iss": "http://127.0.0.1:1"}, "issuer"),
        ({"aud": "another-client"}, "(?i)audience"),
        ({"nonce": "another nonce"}, "nonce"),
        ({"nonce": None}, "nonce"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "expired"),
        ({"iat": None}, "iat"),
        ({"exp": None}, "exp"),
    ],
    ids=["wrong iss", "wrong aud", "wrong nonce", "no nonce", "expired", "no iat", "no exp"],
)
def test_a_token_with_a_wrong_claim_is_refused(provider, changes, why):
    with pytest.raises(TokenRefused, match=why):
        verify_id_token(signed(claims(provider, **changes)), NONCE)


def test_a_token_signed_by_another_key_is_refused(provider):
    forged = signed(claims(provider), key=OTHER_KEY, kid="k1")
    with pytest.raises(TokenRefused, match="Signature verification failed"):
        verify_id_token(forged, NONCE)


def test_an_unsigned_token_is_refused(provider):
    unsigned = jwt.encode(claims(provider), None, algorithm="none")
    with pytest.raises(TokenRefused, match="'none'"):
        verify_id_token(unsigned, NONCE)


def test_hs256_keyed_with_the_public_key_is_refused(provider):
    """The old confusion: the provider's public key (which anyone has) as an HMAC secret."""
    public_pem = PROVIDER_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "kid": "k1"}).encode())
    body = jwt.utils.base64url_encode(json.dumps(claims(provider)).encode())
    signature = hmac_module.new(public_pem, header + b"." + body, hashlib.sha256).digest()
    confused = b".".join([header, body, jwt.utils.base64url_encode(signature)]).decode()
    with pytest.raises(TokenRefused, match="'HS256'"):
        verify_id_token(confused, NONCE)


def test_a_rotated_key_is_fetched_once_its_id_is_seen(provider):
    verify_id_token(signed(claims(provider)), NONCE)  # the key set is now cached
    rotated = rsa_key()
    provider.jwks = {"keys": [public_jwk(rotated, "k2")]}
    assert verify_id_token(signed(claims(provider), key=rotated, kid="k2"), NONCE)


def test_a_discovery_document_for_another_issuer_is_refused(provider):
    provider.document = provider.document | {"issuer": "https://elsewhere.example"}
    with pytest.raises(discovery.DiscoveryError, match="names the issuer"):
        discovery.provider()


def test_a_provider_that_signs_only_with_shared_secrets_is_refused(provider):
    provider.document = provider.document | {"id_token_signing_alg_values_supported": ["HS256"]}
    with pytest.raises(discovery.DiscoveryError, match="public-key signatures only"):
        discovery.provider()
