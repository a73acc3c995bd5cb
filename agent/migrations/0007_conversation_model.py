# A conversation remembers the model it goes on with (a person picks one when several are
# offered). A conversation from before goes on with the model its latest run used, named as
# agent.llm.factory.ModelChoice.name names it ("mock", or "<provider>:<model>"); one with no run
# yet is left "" (the default). `updated_at` is not touched: the sidebar keeps its order.

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Case, OuterRef, Subquery, Value, When
from django.db.models.functions import Coalesce, Concat

MOCK = "mock"  # the mock's name and provider, as they were when this was written


def name_from_latest_run(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    conversations = apps.get_model("agent", "Conversation")
    runs = apps.get_model("agent", "AgentRun")
    db = schema_editor.connection.alias
    qualified = Case(
        When(provider=MOCK, then=Value(MOCK)),
        default=Concat("provider", Value(":"), "model"),
        output_field=models.CharField(),
    )
    latest = (
        runs.objects.using(db)
        .filter(conversation=OuterRef("pk"))
        .order_by("-pk")
        .annotate(qualified=qualified)
        .values("qualified")[:1]
    )
    conversations.objects.using(db).filter(model="").update(
        model=Coalesce(Subquery(latest), Value(""))
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0006_tool_executions_are_run_records"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(name_from_latest_run, migrations.RunPython.noop, elidable=True),
    ]
