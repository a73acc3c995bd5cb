"""`manage.py apikey create USERNAME [--name N] [--scope S ...] [--expires-days D]`: a key of
that person's, for an operator or a script, its secret printed alone on the last line of stdout
(and nowhere else, never logged: a script reads it with `tail -n 1`); `apikey revoke PREFIX`;
`apikey list [USERNAME]`, prefixes only (the secrets are not kept)."""

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from api.keys import InvalidKey, checked_scopes, create_key, revoke
from api.models import ALL_SCOPES, ApiKey, Scope

DEFAULT_NAME = "made at the terminal"
DEFAULT_SCOPES = [Scope.READ.value, Scope.RUN.value]


class Command(BaseCommand):
    help = "Make, revoke or list personal API keys."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Make a key; its secret is the last line.")
        create.add_argument("username")
        create.add_argument("--name", default=DEFAULT_NAME, help="To tell the key apart.")
        create.add_argument(
            "--scope",
            action="append",
            dest="scopes",
            metavar="SCOPE",
            help=f"What the key may do, repeatable: {', '.join(ALL_SCOPES)} "
            f"(default: {' and '.join(DEFAULT_SCOPES)}).",
        )
        create.add_argument(
            "--expires-days", type=int, default=None, help="Stops working after so many days."
        )
        revoke_parser = actions.add_parser("revoke", help="Revoke the key of that prefix.")
        revoke_parser.add_argument("prefix")
        listing = actions.add_parser("list", help="The keys (prefixes, never secrets).")
        listing.add_argument("username", nargs="?")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self.create(options)
        elif action == "revoke":
            self.revoke(options["prefix"])
        else:
            self.list(options["username"])

    def create(self, options: dict[str, Any]) -> None:
        user = person(options["username"])
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days is a number of days, 1 or more.")
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        try:
            scopes = checked_scopes(options["scopes"] or DEFAULT_SCOPES)
            new = create_key(user, options["name"], scopes, expires_at)
        except InvalidKey as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(
            f"The new API key of {user.get_username()}, {new.key.label} "
            f"({', '.join(new.key.scopes)}), shown this once; copy it now:"
        )
        self.stdout.write(new.secret)

    def revoke(self, prefix: str) -> None:
        try:
            key = revoke(ApiKey.objects.select_related("owner"), prefix.rstrip("…"))
        except ApiKey.DoesNotExist:
            raise CommandError(f"No key has the prefix {prefix!r}.") from None
        self.stdout.write(f"Revoked {key.label} of {key.owner.get_username()}.")

    def list(self, username: str | None) -> None:
        keys = ApiKey.objects.select_related("owner").order_by("owner__username", "-created_at")
        if username is not None:
            keys = keys.filter(owner=person(username))
        for key in keys:
            expires = f"{key.expires_at:%Y-%m-%d %H:%M}" if key.expires_at else "never"
            self.stdout.write(
                f"{key.prefix}  {key.owner.get_username()}  {key.name!r}  "
                f"{','.join(key.scopes)}  expires {expires}  {key.state}"
            )


def person(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No person is called {username!r}.")
    return user
