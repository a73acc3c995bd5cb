"""The login page's provider button and password note (identity/templates/identity/)."""

from typing import Any

from django import template
from django.conf import settings

register = template.Library()


@register.inclusion_tag("identity/sign_in_with.html")
def sign_in_with(next_url: str = "") -> dict[str, Any]:
    return {
        "configured": bool(settings.LOOP_OIDC_ISSUER),
        "name": settings.LOOP_OIDC_NAME,
        "next": next_url,
    }


@register.simple_tag
def password_login() -> str:
    """`all`, `operators` or `off`: whether the page shows the password form, and its note."""
    return str(settings.LOOP_PASSWORD_LOGIN)
