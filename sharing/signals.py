"""Deleting a conversation revokes its shared links at once (the page checks the conversation
too, so a link is refused even before this runs). An account's deletion removes its
conversations and, with them, their links."""

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from agent.models import Conversation
from sharing.links import revoke_for_conversation


@receiver(post_save, sender=Conversation, dispatch_uid="sharing.conversation_deleted")
def conversation_deleted(sender: type[Conversation], instance: Conversation, **kwargs: Any) -> None:
    if instance.deleted_at is not None:
        revoke_for_conversation(instance)
