"""`manage.py recheck_identities`: ask the provider now about everyone who signs in through it
(identity/deprovisioning.py), not waiting for the periodic job; `--all` asks about those checked
recently too."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from identity.deprovisioning import Outcome, due, recheck
from identity.models import ProviderIdentity


class Command(BaseCommand):
    help = (
        "Ask the identity provider whether each person who signs in through it is still admitted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all", action="store_true", help="also those checked within the interval"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.LOOP_OIDC_ISSUER:
            raise CommandError("No identity provider is configured (LOOP_OIDC_ISSUER).")
        identities = (
            ProviderIdentity.objects.filter(
                issuer=settings.LOOP_OIDC_ISSUER, removed_at__isnull=True, user__is_active=True
            ).select_related("user")
            if options["all"]
            else due()
        )
        counts = dict.fromkeys(Outcome, 0)
        for identity in identities:
            outcome = recheck(identity)
            counts[outcome] += 1
            if outcome is Outcome.REMOVED:
                self.stdout.write(f"{identity.user.username}: no longer admitted; access ended")
        summary = ", ".join(f"{n} {outcome.value}" for outcome, n in counts.items())
        self.stdout.write(f"Re-checked: {summary}.")
