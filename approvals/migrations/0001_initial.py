# The records of calls that wait for a person's decision, taken up from the agent app
# (agent/migrations/0023_approvals_move_to_their_app.py lets them go) in the migration state
# only: their tables keep the agent_ names they have had since agent's 0018, and their rows.
# Their content types move with them, so the permissions operators hold on them
# (agent.decide_for_others becomes approvals.decide_for_others) and their admin history follow.

import django.db.models.deletion
from django.apps.registry import Apps
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

SERVER_HELP = "The MCP server whose tool was allowed; empty for Loop's own tools."
MODELS = ("approvalrequest", "sitetoolpolicy", "approvalpreference", "toolgrant")


def move_content_types(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """agent's content types of these models become approvals', unless approvals has one."""
    relabel(apps, schema_editor, "agent", "approvals")


def move_content_types_back(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    relabel(apps, schema_editor, "approvals", "agent")


def relabel(apps: Apps, schema_editor: BaseDatabaseSchemaEditor, old: str, new: str) -> None:
    content_types = apps.get_model("contenttypes", "ContentType").objects
    db = schema_editor.connection.alias
    there = set(
        content_types.using(db)
        .filter(app_label=new, model__in=MODELS)
        .values_list("model", flat=True)
    )
    content_types.using(db).filter(app_label=old, model__in=set(MODELS) - there).update(
        app_label=new
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("agent", "0023_approvals_move_to_their_app"),
        ("mcp_servers", "0003_call_seconds_from_the_site"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApprovalPreference",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("ask_run_code", models.BooleanField(default=False)),
                        ("ask_write_file", models.BooleanField(default=False)),
                        ("ask_any_tool", models.BooleanField(default=False)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "user",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="approval_preference",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "agent_approvalpreference",
                    },
                ),
                migrations.CreateModel(
                    name="SiteToolPolicy",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tool", models.CharField(max_length=64, unique=True)),
                        (
                            "mode",
                            models.CharField(
                                choices=[("auto", "Runs without asking"), ("ask", "Asks first")],
                                max_length=8,
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "updated_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "site tool policy",
                        "verbose_name_plural": "site tool policies",
                        "db_table": "agent_sitetoolpolicy",
                        "ordering": ("tool",),
                    },
                ),
                migrations.CreateModel(
                    name="ApprovalRequest",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("seq", models.PositiveIntegerField()),
                        ("step", models.PositiveIntegerField()),
                        ("call_id", models.CharField(max_length=128)),
                        ("tool", models.CharField(max_length=64)),
                        ("arguments", models.TextField()),
                        ("digest", models.CharField(max_length=64)),
                        ("why", models.CharField(blank=True, max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "decision",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("approve", "Approve"),
                                    ("edit", "Edit"),
                                    ("deny", "Deny"),
                                    ("expired", "Expired"),
                                    ("cancelled", "Cancelled"),
                                ],
                                default="",
                                max_length=16,
                            ),
                        ),
                        ("decided_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "decided_via",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("web", "The chat page"),
                                    ("terminal", "The terminal (runagent)"),
                                    ("console", "The console"),
                                ],
                                default="",
                                max_length=16,
                            ),
                        ),
                        ("edited_arguments", models.TextField(blank=True, default="")),
                        ("reason", models.TextField(blank=True, default="")),
                        (
                            "decided_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="approvals",
                                to="agent.agentrun",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "agent_approvalrequest",
                        "ordering": ("run", "seq"),
                        "permissions": (
                            ("decide_for_others", "May approve tool calls on a person's behalf"),
                        ),
                        "indexes": [
                            models.Index(
                                condition=models.Q(("decision", "")),
                                fields=["created_at"],
                                name="approval_waiting_idx",
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "call_id"), name="approval_request_call_unique"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="ToolGrant",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tool", models.CharField(max_length=64)),
                        ("granted_at", models.DateTimeField(auto_now_add=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "conversation",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="tool_grants",
                                to="agent.conversation",
                            ),
                        ),
                        (
                            "granted_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "server",
                            models.ForeignKey(
                                blank=True,
                                help_text=SERVER_HELP,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="mcp_servers.mcpserver",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "agent_toolgrant",
                        "ordering": ("conversation", "tool"),
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("revoked_at__isnull", True)),
                                fields=("conversation", "tool"),
                                name="tool_grant_live_unique",
                            )
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
