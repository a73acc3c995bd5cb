# A tool execution is a run record: the model moves from the tools app to agent, beside the run,
# its events and its breaker trips, so tools/ owns no model and knows nothing of runs. Its table
# keeps its name and its rows; nothing is copied. A database that had it from the tools app's
# migrations keeps that table; a new one gets it created here. Its content type moves with it, so
# the permissions operators hold on it (tools.view_toolexecution becomes agent.view_toolexecution)
# and its admin history follow the model.

import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

TABLE = "tools_toolexecution"


def create_unless_there(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Create the table, unless the tools app's migrations made it already."""
    if TABLE not in schema_editor.connection.introspection.table_names():
        schema_editor.create_model(apps.get_model("agent", "ToolExecution"))


def move_content_type(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The tools app's content type becomes agent's, unless agent has one already."""
    content_types = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if (
        not content_types.objects.using(db)
        .filter(app_label="agent", model="toolexecution")
        .exists()
    ):
        content_types.objects.using(db).filter(app_label="tools", model="toolexecution").update(
            app_label="agent"
        )


def move_content_type_back(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    content_types = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    content_types.objects.using(db).filter(app_label="agent", model="toolexecution").update(
        app_label="tools"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0005_who_continued"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ToolExecution",
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
                        ("step", models.PositiveIntegerField()),
                        ("call_id", models.CharField(max_length=128)),
                        ("tool", models.CharField(max_length=64)),
                        ("arguments", models.TextField()),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("ok", "Ok"),
                                    ("error", "Error"),
                                    ("timeout", "Timeout"),
                                    ("denied", "Denied"),
                                    ("skipped", "Skipped"),
                                    ("interrupted", "Interrupted"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("result", models.TextField(blank=True)),
                        ("error", models.TextField(blank=True)),
                        ("truncated", models.BooleanField(default=False)),
                        ("duration", models.FloatField()),
                        ("policy", models.CharField(blank=True, max_length=128)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="tool_executions",
                                to="agent.agentrun",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "tools_toolexecution",
                        "ordering": ("run", "step", "id"),
                        "indexes": [
                            models.Index(
                                fields=["run", "step"], name="tools_toole_run_id_e1a408_idx"
                            ),
                            models.Index(
                                fields=["tool", "status"], name="tools_toole_tool_e58a6d_idx"
                            ),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(create_unless_there, migrations.RunPython.noop),
        migrations.RunPython(move_content_type, move_content_type_back),
    ]
