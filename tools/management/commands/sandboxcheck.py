"""`manage.py sandboxcheck`: report whether run_code's sandbox works here, and why not."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tools.checks import probe_sandbox


class Command(BaseCommand):
    help = "Run a tiny snippet through run_code's sandbox and report whether it works."

    def handle(self, *args: Any, **options: Any) -> None:
        report = probe_sandbox()
        if not report.works:
            raise CommandError(f"Sandbox ({report.policy}) does not work: {report.detail}")
        self.stdout.write(self.style.SUCCESS(f"Sandbox works: {report.policy}, {report.detail}."))
