"""`manage.py check` refuses a provider configuration that cannot work or is unsafe, naming the
setting: identity.E001 … E006."""

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from identity.passwords import MODES

LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def issuer_problems(issuer: str) -> list[CheckMessage]:
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        return [
            Error(
                f"LOOP_OIDC_ISSUER {issuer!r} is not an issuer URL.",
                hint="Set it to the issuer your provider states, e.g. "
                "https://sso.example.org/realms/staff (no query, no fragment).",
                id="identity.E002",
            )
        ]
    if parts.scheme == "http" and not (settings.DEBUG and is_loopback(parts.hostname)):
        return [
            Error(
                f"LOOP_OIDC_ISSUER {issuer!r} is plain http.",
                hint="Use the provider's https:// issuer; http:// is accepted only on a "
                "loopback host (127.0.0.1, localhost) with DEBUG on, for development.",
                id="identity.E003",
            )
        ]
    return []


@register()
def provider_configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    issuer = settings.LOOP_OIDC_ISSUER
    mode = settings.LOOP_PASSWORD_LOGIN
    if mode not in MODES:
        errors.append(
            Error(
                f"LOOP_PASSWORD_LOGIN is {mode!r}.",
                hint=f"Set it to one of {', '.join(MODES)}.",
                id="identity.E001",
            )
        )
    if mode == "off" and not issuer:
        errors.append(
            Error(
                "LOOP_PASSWORD_LOGIN is off and no identity provider is configured: nobody "
                "could sign in.",
                hint="Set LOOP_OIDC_ISSUER (and its client), or LOOP_PASSWORD_LOGIN=operators.",
                id="identity.E004",
            )
        )
    if not issuer:
        return errors
    errors += issuer_problems(issuer)
    for name in ("LOOP_OIDC_CLIENT_ID", "LOOP_OIDC_CLIENT_SECRET"):
        if not getattr(settings, name):
            errors.append(
                Error(
                    f"{name} is not set, and LOOP_OIDC_ISSUER is.",
                    hint="Register Loop as a confidential client at the provider and set both "
                    "its client id and secret.",
                    id="identity.E005",
                )
            )
    if "openid" not in settings.LOOP_OIDC_SCOPES.split():
        errors.append(
            Error(
                f"LOOP_OIDC_SCOPES {settings.LOOP_OIDC_SCOPES!r} lacks openid.",
                hint="OpenID Connect needs the openid scope: e.g. 'openid email profile'.",
                id="identity.E006",
            )
        )
    return errors
