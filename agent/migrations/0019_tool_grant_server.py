"""A conversation's "always allow" of an MCP tool is bound to the tool's server, and goes with it
(before, a grant named only `<prefix>__<tool>`, and a server added later with that prefix
inherited it)."""

import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.utils import timezone

# How an MCP tool's name reads (mcp_servers.pinning.SEPARATOR): `<prefix>__<tool>`.
SEPARATOR = "__"


def bind_to_servers(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Each MCP tool's grant bound to the server whose tool a run of its person gets under that
    name now (a site server's before their own, as mcp_servers.tools.run_tools chooses); a live
    grant no server provides any more is revoked (it named a server since removed)."""
    ToolGrant = apps.get_model("agent", "ToolGrant")
    McpTool = apps.get_model("mcp_servers", "McpTool")
    grants = ToolGrant.objects.filter(tool__contains=SEPARATOR).select_related("conversation")
    for grant in grants:
        named = McpTool.objects.filter(exposed_name=grant.tool).order_by("pk")
        found = (
            named.filter(server__owner__isnull=True).first()
            or named.filter(server__owner_id=grant.conversation.owner_id).first()
        )
        if found is not None:
            grant.server_id = found.server_id
            grant.save(update_fields=["server"])
        elif grant.revoked_at is None:
            grant.revoked_at = timezone.now()
            grant.save(update_fields=["revoked_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0018_approvals"),
        ("mcp_servers", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolgrant",
            name="server",
            field=models.ForeignKey(
                blank=True,
                help_text="The MCP server whose tool was allowed; empty for Loop's own tools.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="mcp_servers.mcpserver",
            ),
        ),
        migrations.RunPython(bind_to_servers, migrations.RunPython.noop),
    ]
