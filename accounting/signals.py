"""An account deleted keeps its charges: they take an anonymous id in its place (then the
foreign key lets go), so the site's totals never change after the fact."""

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver

from accounting.models import Charge, Price
from accounting.prices import console_rates


@receiver(pre_delete, sender=get_user_model(), dispatch_uid="accounting.anonymise")
def anonymise_charges(sender: Any, instance: Any, **kwargs: Any) -> None:
    Charge.objects.filter(user_id=instance.pk).update(person=f"deleted-{uuid.uuid4().hex[:24]}")


@receiver([post_save, post_delete], sender=Price, dispatch_uid="accounting.prices_changed")
def prices_changed(sender: Any, **kwargs: Any) -> None:
    """This process reads the console's prices again at its next turn (others within
    CACHE_SECONDS, before the price takes effect)."""
    console_rates.forget()
