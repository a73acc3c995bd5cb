"""A server's call time empty unless its operator set one: the site's LOOP_MCP_CALL_SECONDS then
decides (a stored default of 60 s used to win over it). A stored 60 was that default."""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def forget_the_default(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("mcp_servers", "McpServer").objects.filter(call_seconds=60).update(
        call_seconds=None
    )


def restore_the_default(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("mcp_servers", "McpServer").objects.filter(call_seconds=None).update(
        call_seconds=60
    )


class Migration(migrations.Migration):
    dependencies = [("mcp_servers", "0002_connection_unanswered_at")]

    operations = [
        migrations.AlterField(
            model_name="mcpserver",
            name="call_seconds",
            field=models.PositiveIntegerField(
                blank=True,
                default=None,
                help_text=(
                    "Seconds a call may take; empty: the site's setting (LOOP_MCP_CALL_SECONDS)."
                ),
                null=True,
            ),
        ),
        migrations.RunPython(forget_the_default, restore_the_default),
    ]
