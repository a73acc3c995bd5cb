"""The event log's and the audit rows' own index on run_id goes: the unique (run_id, seq) and the
(run_id, step) index serve every look by run, and each row written updated one more index.

Only the index is dropped: Django's AlterField would also drop the foreign key and add it again,
checking every row of the log under a lock."""

import django.db.models.deletion
from django.db import migrations, models

DROP = """
DROP INDEX IF EXISTS agent_runevent_run_id_4d459e52;
DROP INDEX IF EXISTS tools_toolexecution_run_id_0f3265ec;
"""
CREATE = """
CREATE INDEX IF NOT EXISTS agent_runevent_run_id_4d459e52 ON agent_runevent (run_id);
CREATE INDEX IF NOT EXISTS tools_toolexecution_run_id_0f3265ec ON tools_toolexecution (run_id);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0016_run_branches"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(DROP, reverse_sql=CREATE)],
            state_operations=[
                migrations.AlterField(
                    model_name="runevent",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="agent.agentrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolexecution",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tool_executions",
                        to="agent.agentrun",
                    ),
                ),
            ],
        ),
    ]
