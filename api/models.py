"""A person's API keys: what a program shows to act as that person through /api/v1/ and /v1/.
A key is kept only as its SHA-256 digest beside a short public prefix that tells keys apart
(api/keys.py makes and checks them)."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone


class Scope(models.TextChoices):
    """What a key may do. Reading is its own scope: a key may start runs without reading
    files, or read without starting anything."""

    READ = "read", "Read runs, conversations, events, memories and tools"
    RUN = "run", "Start, stop and continue runs; add and forget memories"
    DECIDE = "decide", "Approve or deny calls that wait for a decision"
    FILES = "files", "List, upload, download and delete workspace files"


ALL_SCOPES = [scope.value for scope in Scope]
PREFIX_CHARS = 16  # "loop_" and 11 characters: shown, searched, never secret


class ApiKey(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=PREFIX_CHARS, unique=True)
    digest = models.CharField(max_length=64)  # SHA-256 of the whole key, hex
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices))
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_from = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        verbose_name = "API key"
        ordering = ("-created_at",)
        indexes = (models.Index(fields=["owner", "-created_at"]),)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @property
    def label(self) -> str:
        """How a record shows the key: its prefix and name, never the secret."""
        return f"{self.prefix}… {self.name}"

    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.is_expired() else "active"
