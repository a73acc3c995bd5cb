"""`manage.py rotatecredentials`: seal every stored credential again under the first key of
LOOP_CREDENTIAL_KEYS, so the old key can be removed (docs/mcp.md, "Rotating the credential
key")."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mcp_servers.models import McpConnection, McpServer
from mcp_servers.secrets import CredentialUnreadable, rotate

SEALED = {
    McpServer: ("sealed_headers",),
    McpConnection: ("sealed_client", "sealed_tokens", "sealed_verifier"),
}


class Command(BaseCommand):
    help = "Seal every stored MCP credential again under the first of LOOP_CREDENTIAL_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        resealed, unreadable = 0, 0
        with transaction.atomic():
            for model, fields in SEALED.items():
                for row in model.objects.select_for_update().iterator():  # type: ignore[attr-defined]
                    try:
                        resealed += self.reseal(row, fields)
                    except CredentialUnreadable:
                        unreadable += 1
        self.stdout.write(f"Sealed {resealed} credentials again under the first key.")
        if unreadable:
            raise CommandError(
                f"{unreadable} rows hold a credential no listed key opens: their servers need "
                "the credential entered again."
            )

    def reseal(self, row: Any, fields: tuple[str, ...]) -> int:
        """How many of the row's fields were sealed again; CredentialUnreadable if one cannot be
        opened (the row is left as it was)."""
        changed = 0
        for field in fields:
            sealed = getattr(row, field)
            if sealed:
                setattr(row, field, rotate(sealed))
                changed += 1
        if changed:
            row.save(update_fields=list(fields))
        return changed
