"""What a sign-in through the provider does with the person its verified claims describe.

The person is found by (issuer, subject) only. A first sign-in makes an account as LOOP_SIGNUP
says (`open`: active; `approve`: waiting for an operator, on the console's sign-ups page; `off`:
none), and never takes over an account of the same name or address: that name is refused, and an
operator who means the two to be one links them in the console. Every sign-in then brings the
name, address and allowed groups over from the provider."""

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.utils import timezone

from accounts.forms import WAITING_MESSAGE
from accounts.models import WAITING_FOR_APPROVAL
from accounts.names import look_alike, looks_like_a_placeholder
from identity.models import ProviderIdentity
from mcp_servers.secrets import encrypt

logger = logging.getLogger(__name__)

NAME_CHARS = 150


class SignInRefused(Exception):
    """The provider vouched for the person, and Loop still does not let them in; the message
    is for them."""


def admit(claims: dict[str, Any], refresh_token: str) -> User:
    """The account the claims sign in to, updated from them; SignInRefused if none may."""
    issuer, subject = settings.LOOP_OIDC_ISSUER, str(claims["sub"])
    identity = (
        ProviderIdentity.objects.select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is None:
        identity = first_sign_in(issuer, subject, claims)
    user = identity.user
    refuse_unless_active(user, identity)
    update_person(user, identity, claims)
    note_sign_in(identity, refresh_token)
    return user


def first_sign_in(issuer: str, subject: str, claims: dict[str, Any]) -> ProviderIdentity:
    mode = settings.LOOP_SIGNUP
    if mode == "off":
        raise SignInRefused(
            "You have no account here yet, and this site makes none itself: ask an operator "
            "to add you."
        )
    username = username_of(claims)
    with transaction.atomic():
        with connection.cursor() as cursor:  # the lock accounts.signups takes for new names
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('signup:names'))")
        if looks_like_a_placeholder(username) or look_alike(
            username, User.objects.values_list("username", flat=True).iterator()
        ):
            raise SignInRefused(
                f"An account named {username!r} (or one much like it) already exists here, and "
                "signing in through your organisation never takes over an existing account. "
                "Ask an operator to link yours to it."
            )
        user = User(username=username, email=email_of(claims), is_active=mode == "open")
        user.set_unusable_password()
        user.save()
        logger.info("Provider sign-in made account %s for %s", user.pk, subject)
        return ProviderIdentity.objects.create(user=user, issuer=issuer, subject=subject)


def refuse_unless_active(user: User, identity: ProviderIdentity) -> None:
    if user.is_active:
        return
    if User.objects.filter(WAITING_FOR_APPROVAL, pk=user.pk).exists():
        raise SignInRefused(WAITING_MESSAGE)
    if identity.removed_at is not None:
        raise SignInRefused(
            "Your account here was closed when your organisation stopped admitting you. If "
            "that was a mistake, ask an operator to reactivate it."
        )
    raise SignInRefused("Your account here is deactivated: ask an operator.")


def username_of(claims: dict[str, Any]) -> str:
    name = claims.get(settings.LOOP_OIDC_USERNAME_CLAIM)
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > NAME_CHARS:
        raise SignInRefused(
            f"Your organisation's sign-in gave no usable {settings.LOOP_OIDC_USERNAME_CLAIM!r} "
            "(your name here): ask your administrator."
        )
    return name.strip()


def email_of(claims: dict[str, Any]) -> str:
    email = claims.get("email")
    return email.strip() if isinstance(email, str) else ""


def update_person(user: User, identity: ProviderIdentity, claims: dict[str, Any]) -> None:
    """Name, address and groups as the provider states them now. A new name another account
    holds is not taken (the old one stays, and the log says so)."""
    username = username_of(claims)
    if username != user.username:
        if User.objects.filter(username__iexact=username).exclude(pk=user.pk).exists():
            logger.warning("Provider name %r of account %s is taken; kept", username, user.pk)
        else:
            user.username = username
    user.email = email_of(claims) or user.email
    user.first_name = str(claims.get("given_name") or user.first_name)[:150]
    user.last_name = str(claims.get("family_name") or user.last_name)[:150]
    set_staff(user, identity, groups_of(claims))
    user.save()
    set_groups(user, groups_of(claims))


def groups_of(claims: dict[str, Any]) -> set[str]:
    stated = claims.get(settings.LOOP_OIDC_GROUPS_CLAIM) or []
    if isinstance(stated, str):
        stated = [stated]
    return {str(name) for name in stated} if isinstance(stated, list) else set()


def set_groups(user: User, stated: set[str]) -> None:
    """The person's groups among LOOP_OIDC_GROUPS become those the provider states; their other
    groups (an operator's) stay as they are."""
    allowed = set(settings.LOOP_OIDC_GROUPS)
    current = set(user.groups.filter(name__in=allowed).values_list("name", flat=True))
    wanted = stated & allowed
    if leaving := current - wanted:
        user.groups.remove(*Group.objects.filter(name__in=leaving))
    for name in wanted - current:
        user.groups.add(Group.objects.get_or_create(name=name)[0])


def set_staff(user: User, identity: ProviderIdentity, stated: set[str]) -> None:
    """Staff only through LOOP_OIDC_STAFF_GROUP, and only what that made is taken back: staff an
    operator made stays staff. Never a superuser."""
    staff_group = settings.LOOP_OIDC_STAFF_GROUP
    if not staff_group:
        return
    if staff_group in stated and not user.is_staff:
        user.is_staff = identity.made_staff = True
    elif staff_group not in stated and identity.made_staff:
        user.is_staff = identity.made_staff = False


def note_sign_in(identity: ProviderIdentity, refresh_token: str) -> None:
    now = timezone.now()
    identity.last_sign_in_at = identity.checked_at = now
    if refresh_token:
        identity.refresh_token = encrypt(refresh_token)
    identity.save()
