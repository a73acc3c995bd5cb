"""Who may come in: sign-ups waiting for an operator's approval (and the permission to approve
them, which grants nothing else), and the sign-up attempts each address has made."""

from django.contrib.auth.models import User
from django.db import models
from django.db.models import Q

# What makes an account more than an ordinary user's: only a superuser grants or changes it.
PRIVILEGED = (
    Q(is_staff=True)
    | Q(is_superuser=True)
    | Q(groups__isnull=False)
    | Q(user_permissions__isnull=False)
)
# An account that never logged in, is not active and holds no privilege: a sign-up waiting for
# approval (an account deactivated after use has a last login, and is not waiting for anything).
WAITING_FOR_APPROVAL = Q(is_active=False, last_login__isnull=True) & ~PRIVILEGED


class SignUp(User):
    """A user account seen as a sign-up: what the operators who approve them see and act on."""

    class Meta:
        proxy = True
        default_permissions = ()
        permissions = (("approve_signup", "Can approve sign-ups"),)
        verbose_name = "sign-up waiting for approval"
        verbose_name_plural = "sign-ups waiting for approval"


class SignUpAttempt(models.Model):
    """One sign-up asked for from an address, kept for the throttle's window. In the database,
    so every web process counts the same attempts."""

    address = models.GenericIPAddressField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = (models.Index(fields=["address", "created_at"]),)

    def __str__(self) -> str:
        return f"sign-up from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class ExportStart(models.Model):
    """When a person last started an export of their data, for the limit of one export per
    LOOP_EXPORT_INTERVAL_SECONDS (accounts.exports). In the database, so every web process
    counts the same exports; it goes with the account."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, primary_key=True)
    started_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"export by user {self.user_id} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class PasswordResetAttempt(models.Model):
    """One password reset asked for, kept for the throttle's window: from which client address,
    and for which e-mail address (as a digest: the table says nothing of who asked for what)."""

    address = models.GenericIPAddressField()
    email_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = (
            models.Index(fields=["address", "created_at"]),
            models.Index(fields=["email_digest", "created_at"]),
        )

    def __str__(self) -> str:
        return f"password reset from {self.address} at {self.created_at:%Y-%m-%d %H:%M:%S}"
