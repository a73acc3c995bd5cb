# Memory records the run that stored it as a plain id, so memory's schema and migrations know
# nothing of runs (agent is the layer above). 0002 and 0003 now create the column as a plain
# bigint; a database made by their earlier versions still has a foreign key constraint on it,
# which this drops. The column, its values and its index stay as they are.

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MEMORY_TABLES = ("memory_memory", "memory_forgottenmemory")


def drop_run_constraints(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for table in MEMORY_TABLES:
            constraints = connection.introspection.get_constraints(cursor, table)
            for name, constraint in constraints.items():
                if constraint["foreign_key"] and constraint["columns"] == ["source_run_id"]:
                    schema_editor.execute(
                        f"ALTER TABLE {schema_editor.quote_name(table)} "
                        f"DROP CONSTRAINT {schema_editor.quote_name(name)}"
                    )


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_forgotten_memory")]

    operations = [migrations.RunPython(drop_run_constraints, migrations.RunPython.noop)]
