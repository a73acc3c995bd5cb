"""Signed webhooks, as the Standard Webhooks convention has them (standardwebhooks.com): a JSON
body `{"type", "timestamp", "data"}`, sent with `webhook-id`, `webhook-timestamp` and
`webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` keyed by the endpoint's
`whsec_` secret. A delivery's body and id are fixed when it is made; each attempt signs them
with its own timestamp, so a receiver can refuse replays by the id and stale ones by the time.

Site endpoints are the operators' own, trusted: they may be on a private network. A person's
are guarded as a person's MCP server is (netguard.ssrf): public addresses only, unless the
operator admits a network, at the form and again at every connection.
"""

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import httpcore2
import httpx2
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from netguard import ssrf
from notifications.models import SECRET_PREFIX, Attempt, Delivery, Endpoint, EventType
from notifications.queue import defer_delivery

TIMEOUT_SECONDS = 10.0
# An endpoint's answer is read only to close the request: a little is plenty.
MAX_RESPONSE_BYTES = 64 * 1024
ERROR_CHARS = 500
USER_AGENT = "Loop-Webhooks/1"


class Refused(Exception):
    """A person's webhook URL that cannot be used; the message says why, in words they can act
    on."""


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to."""

    status_code: int | None
    error: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


# Signing ----------------------------------------------------------------------------------------


def signature(secret: str, webhook_id: str, timestamp: int, body: str) -> str:
    """`v1,` and the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" under the secret's bytes."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{webhook_id}.{timestamp}.{body}".encode()
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, webhook_id: str, timestamp: int, body: str) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, webhook_id, timestamp, body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


def body_of(event_type: str, data: dict[str, object], at: datetime) -> str:
    return json.dumps(
        {"type": event_type, "timestamp": at.isoformat(), "data": data}, separators=(",", ":")
    )


# Endpoints --------------------------------------------------------------------------------------


def person_networks() -> tuple[ssrf.IPNetwork, ...]:
    return tuple(
        ipaddress.ip_network(item, strict=False) for item in settings.LOOP_WEBHOOK_PRIVATE_NETWORKS
    )


def check_person_url(url: str) -> None:
    """Refuse a URL a person may not send webhooks to: malformed, or an address (as written, or
    as its name resolves now) that is not public and not admitted by the operator. Every
    connection is vetted again when it is made (a name may resolve elsewhere by then)."""
    try:
        ssrf.check_url(url, person_networks())
        parsed = httpx2.URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        ssrf.vetted_addresses(parsed.raw_host.decode("ascii"), port, person_networks())
    except (ssrf.UnsafeUrl, ssrf.UnsafeAddress, httpcore2.ConnectError) as error:
        raise Refused(str(error)) from None


def endpoints_for(owner_id: int, event_type: str) -> list[Endpoint]:
    """The endpoints told of an event of a run of `owner_id`'s: the site's, and the person's own
    where the operator allows people's webhooks."""
    whose = Q(owner__isnull=True)
    if settings.LOOP_PERSON_WEBHOOKS:
        whose |= Q(owner_id=owner_id)
    endpoints = Endpoint.objects.filter(whose, active=True)
    return [endpoint for endpoint in endpoints if endpoint.wants(event_type)]


# Deliveries -------------------------------------------------------------------------------------


def queue_deliveries(
    endpoints: Iterable[Endpoint], event_type: str, data: dict[str, object], run_id: int | None
) -> list[Delivery]:
    """A delivery per endpoint, its job deferred in the same transaction (a worker sees both or
    neither)."""
    body = body_of(event_type, data, timezone.now())
    made = []
    with transaction.atomic():
        for endpoint in endpoints:
            delivery = Delivery.objects.create(
                endpoint=endpoint,
                webhook_id=f"msg_{secrets.token_urlsafe(18)}",
                event_type=event_type,
                run_id=run_id,
                body=body,
            )
            defer_delivery(delivery.pk)
            made.append(delivery)
    return made


def send_test(endpoint: Endpoint) -> Delivery:
    """A test event to `endpoint`, delivered (and retried, and logged) as any other."""
    data: dict[str, object] = {"endpoint": endpoint.pk, "message": "A test sent from Loop."}
    (delivery,) = queue_deliveries([endpoint], EventType.TEST, data, None)
    return delivery


def attempt(delivery: Delivery) -> Attempt:
    """One try at the delivery, logged; the delivery marked delivered, or failed once no retry
    is left. The caller schedules the next try (`next_retry_seconds`)."""
    endpoint = delivery.endpoint
    number = delivery.attempts.count() + 1
    outcome = post(endpoint, delivery.webhook_id, delivery.body)
    logged = Attempt.objects.create(
        delivery=delivery,
        number=number,
        status_code=outcome.status_code,
        error=outcome.error[:ERROR_CHARS],
        duration=outcome.seconds,
    )
    if outcome.ok:
        delivery.state = Delivery.State.DELIVERED
    elif next_retry_seconds(number) is None:
        delivery.state = Delivery.State.FAILED
    delivery.save(update_fields=["state"])
    return logged


def next_retry_seconds(attempts_made: int) -> int | None:
    """How long after attempt `attempts_made` failed the next is made; None: no more."""
    schedule = settings.LOOP_WEBHOOK_RETRY_SECONDS
    return schedule[attempts_made - 1] if attempts_made <= len(schedule) else None


def post(endpoint: Endpoint, webhook_id: str, body: str) -> Outcome:
    """POST the signed body; whatever happens is an Outcome, never an exception."""
    headers = signed_headers(endpoint.secret, webhook_id, int(time.time()), body)
    started = time.monotonic()
    try:
        with client_for(endpoint) as client:
            response = client.post(endpoint.url, content=body.encode(), headers=headers)
    except Exception as error:  # refused, unreachable, too slow, too large: all a failed try
        return Outcome(None, f"{type(error).__name__}: {error}", time.monotonic() - started)
    seconds = time.monotonic() - started
    said = "" if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
    return Outcome(response.status_code, said, seconds)


def client_for(endpoint: Endpoint) -> httpx2.Client:
    """Every connection vetted: the site's endpoints may be on any network but a cloud's
    metadata service; a person's only on public ones and those the operator admits."""
    allowed = ssrf.ANYWHERE if endpoint.is_site else person_networks()
    return ssrf.guarded_sync_client(
        headers=None,
        timeout=TIMEOUT_SECONDS,
        allowed=allowed,
        max_response_bytes=MAX_RESPONSE_BYTES,
    )
