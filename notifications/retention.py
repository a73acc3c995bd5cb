"""What the notifications keep, bounded: the delivery log for LOOP_KEEP_DELIVERIES_DAYS (a
delivery still being tried stays), and a page's presence for a day, so the records of a web
process that died with its sockets open spare their runs a mail for no longer than that."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from notifications.models import Delivery, Presence

PRESENCE_KEPT = timedelta(days=1)


@dataclass(frozen=True)
class Pruned:
    deliveries: int
    presences: int


def prune() -> Pruned:
    now = timezone.now()
    old = now - timedelta(days=settings.LOOP_KEEP_DELIVERIES_DAYS)
    deliveries = Delivery.objects.filter(created_at__lt=old).exclude(state=Delivery.State.PENDING)
    pruned_deliveries = deliveries.delete()[1].get(Delivery._meta.label, 0)
    gone = Presence.objects.filter(since__lt=now - PRESENCE_KEPT).delete()[0]
    return Pruned(pruned_deliveries, gone)
