# The console's run search (console/runs.py) on PostgreSQL's built-in full-text search: a GIN
# index on the words of a run's task, answer and error (agent.models.run_search_vector). It
# works on every server Loop runs on, the embedded one included, which ships no pg_trgm: the
# trigram indexes 0011 first made (where pg_trgm could be installed) are dropped, so that the
# search is one mechanism everywhere and the runs table carries one search index, not three.
#
# Built CONCURRENTLY, as 0011's: workers write to the runs table all the time. So this migration
# is not atomic; a build cut off leaves an INVALID index: DROP INDEX CONCURRENTLY
# agent_run_search_idx and migrate again. Then ANALYZE, for the planner's statistics on the words.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations

# The trigram indexes a database that ran the first 0011 on a server with pg_trgm may have.
TRIGRAM_INDEXES = ("agent_run_task_trgm", "agent_run_answer_trgm", "agent_run_error_trgm")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agent", "0011_run_search_and_retention_indexes"),
    ]

    operations = [
        *(
            migrations.RunSQL(
                f"DROP INDEX CONCURRENTLY IF EXISTS {name}", migrations.RunSQL.noop, elidable=True
            )
            for name in TRIGRAM_INDEXES
        ),
        AddIndexConcurrently(
            model_name="agentrun",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.search.SearchVector(
                    "task", "answer", "error", config="simple"
                ),
                name="agent_run_search_idx",
            ),
        ),
        # The planner knows how often a word occurs only from the statistics ANALYZE gathers on
        # the index's expression; without them it guesses, and may walk every run.
        migrations.RunSQL("ANALYZE agent_agentrun", migrations.RunSQL.noop, elidable=True),
    ]
