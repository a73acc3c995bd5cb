"""Forgetting memories on an operator's or their owner's behalf, each one recorded (who, when,
which).

The record keeps the fact that a memory was forgotten (its id, owner, origin, the run that stored
it, who forgot it and when), and its text only for LOOP_FORGOTTEN_TEXT_DAYS days: by default not
at all, so what a person took back is not kept verbatim anywhere they cannot see.
`purge_forgotten_texts` blanks the texts older than that, and the periodic task calls it.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from memory.models import ForgottenMemory, Memory

# What a record holds once its text is no longer kept (or never was).
NOT_KEPT = ""


def text_retention() -> timedelta:
    """How long a forgetting record keeps the forgotten text (zero: not kept at all). A number
    of days beyond what a date can count (a typo of a few zeros) keeps it for as long as dates
    go, rather than failing every forgetting."""
    return timedelta(days=min(max(settings.LOOP_FORGOTTEN_TEXT_DAYS, 0), timedelta.max.days))


def forget(memories: QuerySet[Memory], by: User) -> list[ForgottenMemory]:
    """Delete `memories` and record each one, in one transaction: none goes unrecorded."""
    keep_text = text_retention() > timedelta(0)
    with transaction.atomic():
        doomed = list(memories.select_related("owner").defer("embedding").select_for_update())
        records = ForgottenMemory.objects.bulk_create(
            ForgottenMemory(
                memory_id=memory.pk,
                owner=memory.owner,
                owner_name=memory.owner.get_username(),
                text=memory.text if keep_text else NOT_KEPT,
                origin=memory.origin,
                source_run_id=memory.source_run_id,
                forgotten_by=by,
                forgotten_by_name=by.get_username(),
            )
            for memory in doomed
        )
        Memory.objects.filter(pk__in=[memory.pk for memory in doomed]).delete()
    return records


def purge_forgotten_texts(now: datetime | None = None) -> int:
    """Blank the text of every forgetting record older than the retention; the fact stays.
    Returns how many records were blanked."""
    now = now or timezone.now()
    retention = text_retention()
    if retention >= now - datetime.min.replace(tzinfo=now.tzinfo):
        return 0  # kept longer than any record can have been
    cutoff = now - retention
    stale = ForgottenMemory.objects.filter(forgotten_at__lte=cutoff).exclude(text=NOT_KEPT)
    return stale.update(text=NOT_KEPT)


def remembered_by(owner: User, run_ids: Iterable[int] | QuerySet[Any, Any]) -> QuerySet[Memory]:
    """What the runs of these ids stored in their owner's memory (a queryset of ids stays one
    query); a memory a later run merged into names that later run as its source."""
    return Memory.objects.filter(owner=owner, source_run_id__in=run_ids)
