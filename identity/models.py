"""Who signed in through the provider: an account of Loop's tied to one (issuer, subject), the
provider's own id for the person, never their name or address (which change hands and would let
a newcomer take over an old account)."""

from django.conf import settings
from django.db import models


class ProviderIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255, help_text="The provider's `sub` for the person.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    # Sealed with mcp_servers.secrets (Fernet, LOOP_CREDENTIAL_KEYS); "" when the provider gave
    # none, and then the re-check cannot ask about the person.
    refresh_token = models.TextField(blank=True, default="", editable=False)
    checked_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the provider no longer admitted the person."
    )
    made_staff = models.BooleanField(
        default=False, editable=False, help_text="Staff because of LOOP_OIDC_STAFF_GROUP."
    )

    class Meta:
        verbose_name = "provider identity"
        verbose_name_plural = "provider identities"
        constraints = (
            models.UniqueConstraint(fields=("issuer", "subject"), name="one_account_per_subject"),
        )

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
