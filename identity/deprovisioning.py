"""A person the provider no longer admits loses Loop too: the re-check presents each provider
identity's refresh token to the provider's token endpoint (a refresh-token grant) every
LOOP_OIDC_RECHECK_MINUTES. `invalid_grant` means the provider no longer admits them (removed,
disabled, or their grant revoked): the account is deactivated, its sessions deleted, its API keys
revoked, and the identity marked removed for the console. A provider that does not answer, or
answers anything else, changes nothing, and the log says so. Run by a periodic job
(identity/tasks.py) and by `manage.py recheck_identities`."""

import enum
import logging
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from api.models import ApiKey
from identity import discovery
from identity.models import ProviderIdentity
from mcp_servers.secrets import CredentialUnreadable, decrypt, encrypt

logger = logging.getLogger(__name__)


class Outcome(enum.Enum):
    ADMITTED = "admitted"
    REMOVED = "removed"
    UNANSWERED = "unanswered"  # the provider did not answer, or not as OAuth says
    UNCHECKABLE = "uncheckable"  # no (readable) refresh token to present


def due() -> QuerySet[ProviderIdentity]:
    """The identities of active accounts not checked within LOOP_OIDC_RECHECK_MINUTES."""
    since = timezone.now() - timedelta(minutes=settings.LOOP_OIDC_RECHECK_MINUTES)
    return ProviderIdentity.objects.filter(
        Q(checked_at__isnull=True) | Q(checked_at__lt=since),
        issuer=settings.LOOP_OIDC_ISSUER,
        removed_at__isnull=True,
        user__is_active=True,
    ).select_related("user")


def recheck_due() -> dict[Outcome, int]:
    counts = dict.fromkeys(Outcome, 0)
    if not settings.LOOP_OIDC_ISSUER:
        return counts
    for identity in due().iterator():
        counts[recheck(identity)] += 1
    return counts


def recheck(identity: ProviderIdentity) -> Outcome:
    """Ask the provider about one person, and act on what it says."""
    if not identity.refresh_token:
        return Outcome.UNCHECKABLE
    try:
        token = decrypt(identity.refresh_token)
    except CredentialUnreadable:
        logger.warning("Re-check of %s: its refresh token is unreadable", identity)
        return Outcome.UNCHECKABLE
    try:
        answer = requests.post(
            discovery.provider().token_endpoint,
            data={
                "grant_type": "refresh_token",
                "refresh_token": token,
                "client_id": settings.LOOP_OIDC_CLIENT_ID,
                "client_secret": settings.LOOP_OIDC_CLIENT_SECRET,
            },
            timeout=settings.LOOP_OIDC_TIMEOUT_SECONDS,
        )
        body = answer.json() if answer.content else {}
    except (requests.RequestException, ValueError, discovery.DiscoveryError) as error:
        logger.warning("Re-check of %s: the provider did not answer (%s)", identity, error)
        return Outcome.UNANSWERED
    if answer.status_code == 200 and isinstance(body, dict):
        still_admitted(identity, body.get("refresh_token"))
        return Outcome.ADMITTED
    if (
        answer.status_code == 400
        and isinstance(body, dict)
        and body.get("error") == "invalid_grant"
    ):
        remove(identity)
        return Outcome.REMOVED
    logger.warning("Re-check of %s: the provider answered %s", identity, answer.status_code)
    return Outcome.UNANSWERED


def still_admitted(identity: ProviderIdentity, rotated: object) -> None:
    identity.checked_at = timezone.now()
    if isinstance(rotated, str) and rotated:
        identity.refresh_token = encrypt(rotated)  # the old one is spent where rotation is on
    identity.save(update_fields=["checked_at", "refresh_token"])


def remove(identity: ProviderIdentity) -> None:
    """The provider no longer admits the person: the account ends everywhere at once."""
    now = timezone.now()
    with transaction.atomic():
        identity.removed_at = identity.checked_at = now
        identity.refresh_token = ""
        identity.save(update_fields=["removed_at", "checked_at", "refresh_token"])
        end_access(identity.user, now)
    logger.warning("Re-check: the provider no longer admits %s; account deactivated", identity)


def end_access(user: User, now: datetime | None = None) -> None:
    """Deactivated, every session deleted, every API key revoked. A deactivated account's
    sessions would sign no one in anyway (Django's get_user asks is_active), and its keys would
    not work (api.keys.key_for); deleting and revoking keeps it so if it is reactivated."""
    User.objects.filter(pk=user.pk).update(is_active=False)
    user.is_active = False
    ApiKey.objects.filter(owner=user, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
    Session.objects.filter(pk__in=sessions_of(user)).delete()


def sessions_of(user: User) -> list[str]:
    """The keys of the live sessions that sign `user` in. Sessions are stored encoded, so each
    live one is read: a re-check that removes someone is rare."""
    mine = str(user.pk)
    live = Session.objects.filter(expire_date__gt=timezone.now())
    return [
        session.session_key
        for session in live.iterator()
        if str(session.get_decoded().get("_auth_user_id")) == mine
    ]
