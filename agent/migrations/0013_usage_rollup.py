# The usage page's rollup (console/rollup.py): per time zone, day and user, what that user's
# runs of that day did, so that the page over a year reads the sums instead of every run, failed
# tool call and breaker trip of the year. Plain tables, made in SQL: only console/rollup.py reads
# and writes them, and no model needs them. A day's own row sums its users' rows; when users' rows
# are deleted (with their user, by the foreign key's cascade), a trigger forgets their days, which
# the page then sums again from the runs. Filled here for the site's TIME_ZONE from the runs
# already recorded (at 100,000 runs, a few seconds); the page keeps it up to date from then on.

from django.db import migrations


def fill(apps: object, schema_editor: object) -> None:
    from console import rollup

    rollup.rebuild()


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0012_run_full_text_search"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE TABLE agent_usage_rollup (\n"
            "  zone text NOT NULL,\n"
            "  day date NOT NULL,\n"
            "  user_id integer NOT NULL REFERENCES auth_user (id) ON DELETE CASCADE,\n"
            "  runs integer NOT NULL, succeeded integer NOT NULL, halted integer NOT NULL,\n"
            "  failed integer NOT NULL, cancelled integer NOT NULL, tool_calls bigint NOT NULL,\n"
            "  tool_failures integer NOT NULL, breaker_trips integer NOT NULL,\n"
            "  prompt_tokens bigint NOT NULL, completion_tokens bigint NOT NULL,\n"
            "  PRIMARY KEY (zone, day, user_id)\n"
            ");\n"
            "CREATE INDEX agent_usage_rollup_user_idx ON agent_usage_rollup (zone, user_id, day);\n"
            "CREATE TABLE agent_usage_rollup_day (\n"
            "  zone text NOT NULL, day date NOT NULL, users integer NOT NULL,\n"
            "  runs integer NOT NULL, succeeded integer NOT NULL, halted integer NOT NULL,\n"
            "  failed integer NOT NULL, cancelled integer NOT NULL, tool_calls bigint NOT NULL,\n"
            "  tool_failures integer NOT NULL, breaker_trips integer NOT NULL,\n"
            "  prompt_tokens bigint NOT NULL, completion_tokens bigint NOT NULL,\n"
            "  PRIMARY KEY (zone, day)\n"
            ");\n"
            "CREATE FUNCTION agent_usage_rollup_forget_days() RETURNS trigger\n"
            "LANGUAGE plpgsql AS $$\n"
            "BEGIN\n"
            "  DELETE FROM agent_usage_rollup_day d USING (SELECT DISTINCT zone, day FROM gone) g\n"
            "  WHERE d.zone = g.zone AND d.day = g.day;\n"
            "  RETURN NULL;\n"
            "END $$;\n"
            "CREATE TRIGGER agent_usage_rollup_forget_days AFTER DELETE ON agent_usage_rollup\n"
            "  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT\n"
            "  EXECUTE FUNCTION agent_usage_rollup_forget_days();\n"
            "CREATE TABLE agent_usage_rollup_mark (\n"
            "  zone text PRIMARY KEY, refreshed_at timestamptz NOT NULL\n"
            ");",
            "DROP TABLE IF EXISTS agent_usage_rollup_mark, agent_usage_rollup_day,"
            " agent_usage_rollup; DROP FUNCTION IF EXISTS agent_usage_rollup_forget_days();",
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
