"""Which pages may open the chat's websocket: only the site's own origins, by the rule Django's
CSRF check applies to a POST.

A socket's Origin must equal the socket request's own origin (scheme, host and port, the host
checked against ALLOWED_HOSTS as `request.get_host()` does), or be one of CSRF_TRUSTED_ORIGINS.
A browser sends the cookie of this site with a socket opened by any page, so a page on another
port of the same host must not get in: ALLOWED_HOSTS names hosts, not origins, and `*` there
opens nothing here. A request without an Origin is refused (browsers always send one).
"""

import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from asgiref.typing import ASGIReceiveCallable, ASGISendCallable
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

logger = logging.getLogger(__name__)

Scope = dict[str, Any]


def header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode("latin1")
    for key, value in scope.get("headers", ()):
        if key == wanted:
            text: str = value.decode("latin1")
            return text
    return None


def is_secure(scope: Scope) -> bool:
    """As Django's `request.is_secure()`: SECURE_PROXY_SSL_HEADER when set, else the scheme."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        sent = header(scope, meta_name.removeprefix("HTTP_").replace("_", "-"))
        if sent is not None:
            return sent.split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "wss"


def allowed_hosts() -> list[str]:
    """ALLOWED_HOSTS as `request.get_host()` reads it (DEBUG with none allows localhost)."""
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def own_origin(scope: Scope) -> str | None:
    """The origin the socket request was made to, or None if its host is not allowed."""
    host = header(scope, "x-forwarded-host") if settings.USE_X_FORWARDED_HOST else None
    host = host or header(scope, "host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, allowed_hosts()):
        return None
    return f"{'https' if is_secure(scope) else 'http'}://{host}"


def trusted(origin: str, trusted_origins: Iterable[str]) -> bool:
    """Whether CSRF_TRUSTED_ORIGINS names the origin, exactly or as `scheme://*.domain`."""
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    for pattern in trusted_origins:
        if "*" not in pattern:
            if origin == pattern:
                return True
            continue
        allowed = urlsplit(pattern)
        if parsed.scheme == allowed.scheme and is_same_domain(
            parsed.netloc, allowed.netloc.lstrip("*")
        ):
            return True
    return False


def origin_allowed(scope: Scope) -> bool:
    origin = header(scope, "origin")
    if not origin:
        return False
    return origin == own_origin(scope) or trusted(origin, settings.CSRF_TRUSTED_ORIGINS)


class SameOriginValidator:
    """ASGI middleware in front of the socket: a refused origin gets HTTP 403 at the handshake,
    as channels' own OriginValidator answers."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards websockets only")
        if origin_allowed(scope):
            await self.application(scope, receive, send)
            return
        logger.warning(
            "Refused a websocket from origin %r to host %r",
            header(scope, "origin"),
            header(scope, "host"),
        )
        # Loop reads a scope as a dict; channels' stubs want their TypedDict.
        await WebsocketDenier()(scope, receive, send)  # type: ignore[arg-type]
