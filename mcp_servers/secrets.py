"""Credentials at rest: the headers and OAuth tokens Loop keeps for MCP servers, encrypted; and
blanked out of anything a server sends back.

Keys come from the setting LOOP_CREDENTIAL_KEYS, newest first: the first encrypts, every one
decrypts, so an operator rotates by putting a new key in front and re-encrypting with `rotate`.
Without that setting one key is derived from SECRET_KEY, so a fresh site works at once.
"""

import base64
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from core.text import each_text

# What stands in a server's answer for a credential Loop sent it.
REDACTED = "[redacted]"
# Shorter values are not looked for: blanking them would mangle ordinary words.
MIN_REDACTED_CHARS = 8

# HKDF's info names the purpose, so the derived key is no key SECRET_KEY serves elsewhere.
_DERIVATION_INFO = b"loop credentials"


class CredentialUnreadable(Exception):
    """A stored credential that none of the configured keys decrypts (or that is not a token)."""


def sent_secrets(headers: dict[str, str]) -> tuple[str, ...]:
    """What of `headers` a server must never hand back to anyone: each value and each of its
    words ("Bearer abc…" and "abc…"), the longest first so a whole value goes before its part."""
    found = {part for value in headers.values() for part in (value, *value.split())}
    long_enough = (secret for secret in found if len(secret) >= MIN_REDACTED_CHARS)
    return tuple(sorted(long_enough, key=len, reverse=True))


def redacted(text: str, secrets: Iterable[str]) -> str:
    """`text` with every one of `secrets` (what Loop sent the server) blanked out."""
    for secret in secrets:
        if len(secret) >= MIN_REDACTED_CHARS:
            text = text.replace(secret, REDACTED)
    return text


def redacted_json(value: Any, secrets: Sequence[str]) -> Any:
    """A JSON value (a parsed answer) with `redacted` applied to every string in it, keys too."""
    return each_text(value, partial(redacted, secrets=secrets)) if secrets else value


def encrypt(text: str) -> str:
    """The text encrypted under the first key, as ASCII fit for a text column."""
    return _keys().encrypt(text.encode()).decode("ascii")


def decrypt(token: str) -> str:
    """The text `encrypt` was given, read with whichever configured key made the token."""
    try:
        return _keys().decrypt(token.encode()).decode()
    except InvalidToken:
        raise _unreadable() from None


def rotate(token: str) -> str:
    """The same text encrypted under the first key, so older keys can then be retired."""
    try:
        return _keys().rotate(token.encode()).decode("ascii")
    except InvalidToken:
        raise _unreadable() from None


def generate_key() -> str:
    """A new random key for LOOP_CREDENTIAL_KEYS."""
    return Fernet.generate_key().decode("ascii")


def _unreadable() -> CredentialUnreadable:
    return CredentialUnreadable(
        "the credential is encrypted under a key no longer in LOOP_CREDENTIAL_KEYS "
        "(or, with that setting empty, under a different SECRET_KEY); enter it again"
    )


def _keys() -> MultiFernet:
    """The configured keys, read on each use so a changed setting takes effect at once."""
    from django.conf import settings

    configured: Sequence[str] = getattr(settings, "LOOP_CREDENTIAL_KEYS", None) or []
    if isinstance(configured, str):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("LOOP_CREDENTIAL_KEYS must be a list of keys, not one string")
    if not configured:
        return MultiFernet([Fernet(_derived_key(settings.SECRET_KEY))])
    return MultiFernet([_fernet(position, key) for position, key in enumerate(configured)])


def _fernet(position: int, key: str) -> Fernet:
    try:
        return Fernet(key)
    except ValueError:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"LOOP_CREDENTIAL_KEYS[{position}] is not a Fernet key (32 url-safe base64 bytes); "
            "make one with mcp_servers.secrets.generate_key()"
        ) from None


def _derived_key(secret_key: str) -> bytes:
    """A Fernet key from SECRET_KEY, stable for as long as SECRET_KEY is."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DERIVATION_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))
