"""`manage.py calltool TOOL 'JSON-ARGS' --user NAME`: one tool call, as the agent makes it."""

import dataclasses
import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.toolset import default_registry
from sandbox.host import SandboxHost
from tools.context import context_for


class Command(BaseCommand):
    help = (
        "Run one tool call through the agent's dispatcher, sandbox and workspace, and print the "
        "result as JSON. Exit code 0 for an ok result, 1 for any other."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tool", help="Tool name, e.g. run_code.")
        parser.add_argument("arguments", nargs="?", default="{}", help="Arguments as JSON.")
        parser.add_argument("--user", required=True, help="Username the call acts for.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get_by_natural_key(options["user"])
        except User.DoesNotExist:
            raise CommandError(f"No user named {options['user']!r}.") from None
        with SandboxHost() as sandbox:  # this command's own, for a run_code call
            context = dataclasses.replace(context_for(user), sandbox=sandbox)
            result = default_registry().dispatch(options["tool"], options["arguments"], context)
        self.stdout.write(json.dumps(result.as_dict(), ensure_ascii=False))
        if not result.ok:
            raise SystemExit(1)
