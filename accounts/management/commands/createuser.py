"""`manage.py createuser USERNAME [--email E] [--staff] [--approve] [--noinput]`: an account made
at a terminal, checked as a sign-up is (the name's rules and look-alikes, the password's
validators). Without --approve it waits for approval like a sign-up; the password is asked for
twice, or with --noinput read from DJANGO_SUPERUSER_PASSWORD (as createsuperuser reads it)."""

import getpass
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.forms import SignUpForm
from accounts.signups import create_account

PASSWORD_VARIABLE = "DJANGO_SUPERUSER_PASSWORD"  # noqa: S105 (a variable's name)


class Command(BaseCommand):
    help = "Make a login: waiting for approval, approved (--approve), or staff (--staff)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="", help="For password resets and approval mail.")
        parser.add_argument("--staff", action="store_true", help="May use the operators' console.")
        parser.add_argument(
            "--approve", action="store_true", help="May log in at once (else waits for approval)."
        )
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help=f"Ask nothing: the password is read from {PASSWORD_VARIABLE}.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = self.password(options["interactive"])
        form = SignUpForm(
            {
                "username": options["username"],
                "email": options["email"],
                "password1": password,
                "password2": password,
            }
        )
        if not form.is_valid():
            raise CommandError(said(form.errors.get_json_data()))
        user = create_account(
            form.cleaned_data["username"],
            password,
            active=options["approve"],
            email=form.cleaned_data["email"],
        )
        if user is None:
            raise CommandError("That name is taken, or looks too much like one that is.")
        if options["staff"]:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        self.stdout.write(standing(user.get_username(), options["approve"], options["staff"]))

    def password(self, interactive: bool) -> str:
        if not interactive:
            password = os.environ.get(PASSWORD_VARIABLE, "")
            if not password:
                raise CommandError(f"With --noinput, set the password in {PASSWORD_VARIABLE}.")
            return password
        if not sys.stdin.isatty():
            raise CommandError("No terminal to ask for the password: use --noinput.")
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Password (again): "):
            raise CommandError("The two passwords differ.")
        return password


def said(errors: dict[str, list[dict[str, str]]]) -> str:
    return " ".join(error["message"] for field in errors.values() for error in field)


def standing(username: str, approved: bool, staff: bool) -> str:
    if approved:
        return f"Made {username}{' (staff)' if staff else ''}: can log in now."
    if staff:
        return f"Made {username} (staff), inactive: a superuser activates it in the console."
    return f"Made {username}: waits for approval on the console's sign-ups page."
