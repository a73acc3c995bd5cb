"""Runs move from django-tasks to Procrastinate: django-tasks' queue table goes, and a run that
table still held (queued, or running when its worker stopped) becomes interrupted, which its owner
can continue from its log."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.utils import timezone

LEGACY_NOTE = (
    "Loop's run engine changed while this run was waiting or running, so its worker never "
    "finished it. Continue it to go on from where it stopped."
)


def interrupt_legacy_runs(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    AgentRun = apps.get_model("agent", "AgentRun")
    AgentRun.objects.filter(status__in=("queued", "running")).update(
        status="interrupted", error=LEGACY_NOTE, finished_at=timezone.now()
    )


class Migration(migrations.Migration):
    dependencies = [("agent", "0003_engine")]

    operations = [
        migrations.RunPython(interrupt_legacy_runs, migrations.RunPython.noop),
        migrations.RunSQL(
            [
                "DROP TABLE IF EXISTS django_tasks_database_dbtaskresult CASCADE",
                "DELETE FROM django_migrations WHERE app = 'django_tasks_database'",
            ],
            migrations.RunSQL.noop,
        ),
    ]
