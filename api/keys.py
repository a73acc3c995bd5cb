"""Making, checking and revoking personal API keys. A key reads `loop_<11 characters>_<43
characters>`: the first part is its public prefix, stored in clear to find the key and to tell
keys apart; the whole key is stored only as its SHA-256 digest (a key has 256 random bits, so a
fast hash is enough: nothing to guess), compared in constant time. The secret is shown once, by
whoever made it, and never logged."""

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from api.models import ALL_SCOPES, PREFIX_CHARS, ApiKey, Scope

KEY_START = "loop_"
NAME_CHARS = 100
# A key's last use is written at most this often (or at once from another address): a busy
# program's every request is not a write.
LAST_USED_SECONDS = 60


class InvalidKey(ValueError):
    """A key that cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class NewKey:
    """A key just made: the row, and the secret, shown this once. Its repr leaves the secret
    out: a page's context is written in full to django.template's DEBUG log when one of its
    variables is missing."""

    key: ApiKey
    secret: str = field(repr=False)


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def prefix_of(secret: str) -> str | None:
    """The public prefix of something that looks like a key, else None."""
    if not secret.startswith(KEY_START) or len(secret) > 200:
        return None
    prefix, separator, rest = secret[:PREFIX_CHARS], secret[PREFIX_CHARS : PREFIX_CHARS + 1], secret
    return prefix if separator == "_" and len(rest) > PREFIX_CHARS + 1 else None


def checked_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes in their usual order, or InvalidKey naming the first unknown one."""
    chosen = set(scopes)
    unknown = sorted(chosen - set(ALL_SCOPES))
    if unknown:
        raise InvalidKey(
            f"Unknown scope {unknown[0]!r}; a key's scopes are among {', '.join(ALL_SCOPES)}."
        )
    if not chosen:
        raise InvalidKey(f"Give the key at least one scope: {', '.join(ALL_SCOPES)}.")
    return [scope for scope in ALL_SCOPES if scope in chosen]


def create_key(
    owner: User,
    name: str,
    scopes: Iterable[str] = (Scope.READ, Scope.RUN),
    expires_at: datetime | None = None,
) -> NewKey:
    """A new key of `owner`'s: stored as its digest; the secret is returned this once."""
    name = name.strip()
    if not name:
        raise InvalidKey("Name the key, so you can tell it apart later (say, what uses it).")
    if len(name) > NAME_CHARS:
        raise InvalidKey(f"A key's name is at most {NAME_CHARS} characters.")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidKey("The expiry is in the past; pick a later date, or none.")
    if not owner.is_active:
        raise InvalidKey(f"{owner.get_username()} is deactivated; their keys would not work.")
    scopes = checked_scopes(str(scope) for scope in scopes)
    prefix = KEY_START + secrets.token_hex(6)[: PREFIX_CHARS - len(KEY_START)]
    secret = f"{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        owner=owner,
        name=name,
        prefix=prefix,
        digest=digest_of(secret),
        scopes=scopes,
        expires_at=expires_at,
    )
    return NewKey(key=key, secret=secret)


def key_for(secret: str) -> ApiKey | None:
    """The working key `secret` is, with its owner: None for anything else (no such key, a
    wrong secret, revoked, expired, its owner deactivated or deleted)."""
    prefix = prefix_of(secret)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("owner").filter(prefix=prefix).first()
    if key is None or not hmac.compare_digest(key.digest, digest_of(secret)):
        return None
    if key.revoked_at is not None or key.is_expired() or not key.owner.is_active:
        return None
    return key


def note_use(key: ApiKey, address: str | None) -> None:
    """Record when and from where the key was last used (at most once a minute per address)."""
    now = timezone.now()
    recent = key.last_used_at is not None and (now - key.last_used_at).total_seconds() < (
        LAST_USED_SECONDS
    )
    if recent and key.last_used_from == address:
        return
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=now, last_used_from=address)
    key.last_used_at, key.last_used_from = now, address


def keys_of(owner: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(owner=owner)


def revoke(keys: QuerySet[ApiKey], prefix: str, *, by: User | None = None) -> ApiKey:
    """Revoke the key of that prefix among `keys` (ApiKey.DoesNotExist if none): it stops
    working at the next request. Revoking a revoked key changes nothing."""
    key = keys.get(prefix=prefix)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.revoked_by = by
        key.save(update_fields=["revoked_at", "revoked_by"])
    return key
