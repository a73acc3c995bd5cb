"""A person who deletes their own account leaves their charges to the placeholder name their runs
pass to (accounts/my_data.py): the ledger then names the same anonymous id as the console's runs,
and its totals stay as they were. (An account deleted any other way gets an id of its own,
accounting/signals.py.)"""

from django.contrib.auth.models import AbstractBaseUser

from accounting.models import Charge


def hand_over_charges(user: AbstractBaseUser, placeholder_name: str) -> int:
    """The person's charges, named by the placeholder instead; how many."""
    return Charge.objects.filter(user_id=user.pk).update(user=None, person=placeholder_name)
