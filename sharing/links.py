"""What people and operators do with shared links: share a conversation, open a link, revoke one,
and the audit of each look. The views, the console and the signals call these; none decides.

Who may open a link is asked at every look, never at share time alone: the link must be live
(not revoked, its conversation not deleted, its sharer's account active), and the viewer in its
audience (any signed-in person, or a member of its group; its sharer always). A person outside
the audience is told the link does not exist, as for a forged token: a refusal names nothing.
"""

import hashlib
import secrets
from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from agent import selectors
from agent.models import Conversation
from sharing.files import FilesTooLarge, copy_written
from sharing.models import Audience, LinkView, SharedFile, SharedLink
from sharing.snapshot import TooLarge, snapshot_of

TOKEN_BYTES = 32  # 256 bits: secrets.token_urlsafe's 43 characters


class ShareRefused(Exception):
    """A share that was not made, with the sentence its person reads."""


class NotShared(Exception):
    """No link of that token for this viewer: forged, deleted, or another audience's."""


class Revoked(Exception):
    """The link was revoked (or its conversation or sharer deleted): nothing of it is shown."""

    def __init__(self, link: SharedLink) -> None:
        super().__init__("This link was revoked.")
        self.link = link


@dataclass(frozen=True)
class NewLink:
    """A link just made, with its token: shown this once (only its digest is kept)."""

    link: SharedLink
    token: str


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def groups_of(person: User) -> QuerySet[Group]:
    """The groups a person may share with: their own."""
    return person.groups.order_by("name")


def share(
    sharer: User,
    conversation_id: int,
    *,
    group_id: int | None = None,
    include_files: bool = False,
) -> NewLink:
    """Share the sharer's conversation as it stands, with everyone signed in (`group_id` None)
    or with one of their groups. Conversation.DoesNotExist for one not theirs; ShareRefused,
    saying why, for a group not theirs or a copy too large."""
    conversation = selectors.conversations_for(sharer).get(pk=conversation_id)
    group = None
    if group_id is not None:
        group = groups_of(sharer).filter(pk=group_id).first()
        if group is None:
            raise ShareRefused("You can share only with a group you belong to: pick one of yours.")
    try:
        snapshot = snapshot_of(conversation)
        copied = (
            copy_written(sharer.pk, selectors.runs_of(conversation).runs) if include_files else None
        )
    except (TooLarge, FilesTooLarge) as refused:
        raise ShareRefused(str(refused)) from None
    if copied is not None:
        snapshot["files"] = [{"path": path, "size": len(content)} for path, content in copied.files]
        snapshot["files_missing"] = copied.missing
    token = secrets.token_urlsafe(TOKEN_BYTES)
    with transaction.atomic():
        link = SharedLink.objects.create(
            conversation=conversation,
            sharer=sharer,
            token_digest=digest_of(token),
            audience=Audience.GROUP if group else Audience.SITE,
            group=group,
            include_files=include_files,
            snapshot=snapshot,
        )
        if copied is not None:
            SharedFile.objects.bulk_create(
                SharedFile(link=link, path=path, content=content, size=len(content))
                for path, content in copied.files
            )
    return NewLink(link, token)


def opened(token: str, viewer: User) -> SharedLink:
    """The link of `token`, for `viewer` to see: NotShared when there is none for them,
    Revoked when it was."""
    link = (
        SharedLink.objects.select_related("sharer", "conversation", "group")
        .filter(token_digest=digest_of(token))
        .first()
    )
    if link is None or not in_audience(link, viewer):
        raise NotShared
    if not is_live(link):
        raise Revoked(link)
    return link


def in_audience(link: SharedLink, viewer: User) -> bool:
    if viewer.pk == link.sharer_id or link.audience == Audience.SITE:
        return True
    return link.group_id is not None and viewer.groups.filter(pk=link.group_id).exists()


def is_live(link: SharedLink) -> bool:
    return (
        link.revoked_at is None and link.conversation.deleted_at is None and link.sharer.is_active
    )


def record_view(link: SharedLink, viewer: User, file: str = "") -> None:
    """Audit one look: the page, or one of its files. The sharer's own looks count too: the
    audit says who saw what, and the sharer is one of them."""
    LinkView.objects.create(link=link, viewer=viewer, file=file)


def links_of(sharer: User) -> QuerySet[SharedLink]:
    """The person's shared links, newest first, each with its count of looks (`view_count`)."""
    return (
        SharedLink.objects.filter(sharer=sharer)
        .select_related("group")
        .annotate(view_count=Count("views"))
        .order_by("-created_at", "-id")
    )


def revoke(links: QuerySet[SharedLink], link_id: int, *, by: User) -> SharedLink:
    """Revoke the link of that id among `links` (a person's own, or every link for an
    operator), from this moment: SharedLink.DoesNotExist for one not among them. Revoking a
    revoked link changes nothing."""
    with transaction.atomic():
        link = links.select_for_update().get(pk=link_id)
        if link.revoked_at is None:
            link.revoked_at, link.revoked_by = timezone.now(), by
            link.save(update_fields=["revoked_at", "revoked_by"])
    return link


def revoke_for_conversation(conversation: Conversation) -> int:
    """Revoke every live link of a conversation its owner deleted; how many."""
    return SharedLink.objects.filter(conversation=conversation, revoked_at__isnull=True).update(
        revoked_at=conversation.deleted_at or timezone.now(), revoked_by_id=conversation.owner_id
    )
