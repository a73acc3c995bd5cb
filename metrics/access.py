"""Who may read /metrics: a scraper with the site's token, or one at an allowed address. The
series say much about the site (its models, tools, load), nothing about a person; still, only
the operators' Prometheus reads them."""

import hmac
import ipaddress
from collections.abc import Sequence
from functools import cache
from http import HTTPStatus

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def networks(allowed: tuple[str, ...]) -> tuple[Network, ...]:
    """LOOP_METRICS_ALLOW's addresses and CIDRs; one that is neither stops the site at start."""
    try:
        return tuple(ipaddress.ip_network(entry, strict=False) for entry in allowed)
    except ValueError as error:
        raise ImproperlyConfigured(f"LOOP_METRICS_ALLOW: {error}") from None


def refusal(request: HttpRequest, token: str, allowed: Sequence[str]) -> HTTPStatus | None:
    """None if the request may read the series; else why not: 401, no token given (the
    scraper is told to bring one), or 403, a wrong one."""
    if from_allowed_address(request, tuple(allowed)):
        return None
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return HTTPStatus.UNAUTHORIZED
    if hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    return HTTPStatus.FORBIDDEN


def from_allowed_address(request: HttpRequest, allowed: tuple[str, ...]) -> bool:
    if not allowed:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in networks(allowed))
