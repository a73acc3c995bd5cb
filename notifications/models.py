"""What people and operators asked to be told of runs, and what was told: a person's mail
choices, who is on a run's page now, the one mail a run may get, webhook endpoints (the site's
and people's) and each delivery with its attempts, the log operators read in the console.

Runs are named by number, with no relation to their rows (as the ledger names them): a delivery
log outlives the run it told of.
"""

import base64
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

SECRET_PREFIX = "whsec_"  # noqa: S105 (the secrets' form, not one)
SECRET_BYTES = 32


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and the base64 of random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


class EventType(models.TextChoices):
    """What a webhook tells of (Standard Webhooks' `type`)."""

    RUN_FINISHED = "run.finished", "A run finished (succeeded, halted or cancelled)"
    RUN_FAILED = "run.failed", "A run failed"
    RUN_WAITING = "run.waiting", "A run waits for a decision"
    APPROVAL_DECIDED = "approval.decided", "A waiting call was decided"
    TEST = "test", "A test sent by hand"


class MailReason(models.TextChoices):
    """Why a run's person is mailed."""

    WAITING = "waiting", "a call waits for your decision"
    FAILED = "failed", "the run failed"
    LONG_RUN = "long_run", "a long run ended"


class MailChoice(models.Model):
    """What a person asked to be mailed about; no row: nothing."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mail_choice"
    )
    waiting = models.BooleanField("A call waits for my decision", default=False)
    failed = models.BooleanField("A run I left failed", default=False)
    long_run = models.BooleanField("A long run of mine ended", default=False)

    def __str__(self) -> str:
        return f"Mail choices of user {self.user_id}"

    def wants(self, reason: MailReason) -> bool:
        return bool(getattr(self, reason.value))


class Presence(models.Model):
    """One socket of a person's watching one run's page (chat/consumers.py records it): while
    any is there, the run's person is not mailed about it."""

    channel = models.CharField(max_length=255)
    run_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    since = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=("channel", "run_id"), name="one_presence_per_socket"),
        )
        indexes = (models.Index(fields=("run_id", "user_id")),)

    def __str__(self) -> str:
        return f"User {self.user_id} on run {self.run_id}'s page"


class RunMail(models.Model):
    """The one mail a run's person got about it: its row, inserted before the mail goes, is
    what makes a second impossible."""

    run_id = models.BigIntegerField(unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    reason = models.CharField(max_length=16, choices=MailReason.choices)
    sent_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Mail about run {self.run_id}"


class Endpoint(models.Model):
    """Where webhooks go: the site's (no owner, set by operators, trusted: it may be on a private
    network) or a person's (guarded as a person's MCP server is: public addresses only, unless
    the operator admits a network)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_endpoints",
        help_text="Empty: the site's endpoint, told of every person's runs.",
    )
    url = models.URLField(max_length=2000)
    events = models.JSONField(
        default=list, blank=True, help_text="The event types it is sent; empty: all of them."
    )
    secret = models.CharField(max_length=128, default=new_secret, editable=False)
    active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.url

    @property
    def is_site(self) -> bool:
        return self.owner_id is None

    def wants(self, event_type: str) -> bool:
        return self.active and (not self.events or event_type in self.events)


class Delivery(models.Model):
    """One event for one endpoint: its body, fixed when it was made (each retry sends the same
    bytes under the same webhook-id), and where it stands."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # every retry failed, or the endpoint is gone or refused

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=64, unique=True)
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    run_id = models.BigIntegerField(null=True, blank=True)
    body = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.event_type} {self.webhook_id}"


class Attempt(models.Model):
    """One try at a delivery: what the endpoint answered, or why nothing was."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration = models.FloatField(help_text="Seconds.")

    class Meta:
        ordering = ("number",)
        constraints = (
            models.UniqueConstraint(fields=("delivery", "number"), name="one_attempt_per_number"),
        )

    def __str__(self) -> str:
        return f"Attempt {self.number}"

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
