"""A conversation shared by link: the link (who shared what, with whom, until when), the copy it
shows (made once, at share time), the files copied with it, and who looked.

The token is stored only as its SHA-256 digest (`token_digest`, unique): the token has 256 random
bits, so a fast hash leaves nothing to guess, and a database read (a backup, the console) never
yields a working link. A link is found by its digest, an equality on an index, so how long a
lookup takes tells nothing of the token. The cost: the link is shown once, when it is made.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from agent.models import Conversation

DIGEST_CHARS = 64  # SHA-256, hex
PATH_CHARS = 1024


class Audience(models.TextChoices):
    SITE = "site", "Everyone signed in to this site"
    GROUP = "group", "One group"


class SharedLink(models.Model):
    """A read-only copy of a conversation as it stood when shared, for its audience, until
    revoked. Deleting the conversation or its owner's account revokes it (sharing/signals.py, and
    the cascade of an account's deletion)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="shared_links"
    )
    sharer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="shared_links"
    )
    token_digest = models.CharField(max_length=DIGEST_CHARS, unique=True)
    audience = models.CharField(max_length=8, choices=Audience.choices)
    # With a GROUP audience, the one group that may open it (one the sharer was in); a group
    # deleted later leaves the link for no one.
    group = models.ForeignKey(
        Group, on_delete=models.SET_NULL, null=True, blank=True, related_name="shared_links"
    )
    include_files = models.BooleanField(default=False)
    # The copy the page draws, and nothing else: the title and the shown branch's turns, each
    # with its cards' data (sharing/snapshot.py). Later turns, edits and pruning change nothing.
    snapshot = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = (models.Index(fields=["sharer", "-created_at"], name="shared_link_by_sharer"),)

    def __str__(self) -> str:
        return f"{self.title} shared by {self.sharer_id}"

    @property
    def title(self) -> str:
        title = self.snapshot.get("title") if isinstance(self.snapshot, dict) else ""
        return str(title or "Untitled conversation")


class SharedFile(models.Model):
    """A file the conversation's runs wrote, copied from the sharer's workspace at share time:
    the link serves this copy, never the workspace."""

    link = models.ForeignKey(SharedLink, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=PATH_CHARS)  # from the workspace's root, '/'-separated
    content = models.BinaryField()
    size = models.PositiveBigIntegerField()

    class Meta:
        ordering = ("path",)
        constraints = (
            models.UniqueConstraint(fields=["link", "path"], name="shared_file_once_a_link"),
        )

    def __str__(self) -> str:
        return self.path


class LinkView(models.Model):
    """One look at a shared link: its page, or one of its files (`file`). Refused looks (another
    group's person, a revoked link) are not rows: nothing was shown."""

    link = models.ForeignKey(SharedLink, on_delete=models.CASCADE, related_name="views")
    # A viewer's account deleted later leaves the row, unnamed.
    viewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="shared_link_views",
    )
    viewed_at = models.DateTimeField(auto_now_add=True)
    file = models.CharField(max_length=PATH_CHARS, blank=True)

    class Meta:
        ordering = ("-viewed_at", "-id")
        indexes = (models.Index(fields=["link", "-viewed_at"], name="link_view_by_link"),)

    def __str__(self) -> str:
        return f"{self.viewer_id} viewed link {self.link_id}"
