"""Who is on a run's page now, as the chat's socket says (chat/consumers.py): a person watching a
run is not mailed about it. Kept in the database, since the socket lives in a web process and
the decision to mail is taken in a worker."""

from channels.db import database_sync_to_async

from notifications.models import Presence


@database_sync_to_async
def watching(user_id: int, run_id: int, channel: str) -> None:
    """The person's socket `channel` shows run `run_id` (checked theirs by the socket)."""
    Presence.objects.get_or_create(channel=channel, run_id=run_id, defaults={"user_id": user_id})


@database_sync_to_async
def left(channel: str, run_id: int | None = None) -> None:
    """The socket stopped showing `run_id`, or, with None, closed: it shows none any more."""
    gone = Presence.objects.filter(channel=channel)
    if run_id is not None:
        gone = gone.filter(run_id=run_id)
    gone.delete()


def on_the_page(user_id: int, run_id: int) -> bool:
    """Whether the run's person has its page open now, in any window."""
    return Presence.objects.filter(user_id=user_id, run_id=run_id).exists()
