"""Forgetting memories on an operator's or their owner's behalf, each one recorded (who, when,
which)."""

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet

from memory.models import ForgottenMemory, Memory


def forget(memories: QuerySet[Memory], by: AbstractBaseUser) -> list[ForgottenMemory]:
    """Delete `memories` and record each one, in one transaction: none goes unrecorded."""
    with transaction.atomic():
        doomed = list(memories.select_related("owner").defer("embedding").select_for_update())
        records = ForgottenMemory.objects.bulk_create(
            ForgottenMemory(
                memory_id=memory.pk,
                owner=memory.owner,
                owner_name=memory.owner.get_username(),
                text=memory.text,
                origin=memory.origin,
                source_run_id=memory.source_run_id,
                forgotten_by=by,
                forgotten_by_name=by.get_username(),
            )
            for memory in doomed
        )
        Memory.objects.filter(pk__in=[memory.pk for memory in doomed]).delete()
    return records


def remembered_by(owner: AbstractBaseUser, run_ids: Iterable[int]) -> QuerySet[Memory]:
    """What the runs of these ids stored in their owner's memory (a queryset of ids stays one
    query); a memory a later run merged into names that later run as its source."""
    return Memory.objects.filter(owner=owner, source_run_id__in=run_ids)
