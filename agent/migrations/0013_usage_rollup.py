# The usage page's rollup (console/rollup.py, tables in agent/usage.py): per time zone, day and
# user, what that user's runs of that day did, and per day the sum of its users, so that the page
# over a year reads those sums instead of every run, failed tool call and breaker trip of the
# year. When users' rows are deleted (with their user), a trigger forgets their days, which the
# page then sums again from the runs. Not filled here (console.rollup is a higher layer than this
# app): the page sums a day it never summed at its first read of it, and keeps it up to date.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

FORGET_DAYS = """
CREATE FUNCTION agent_usage_rollup_forget_days() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM agent_usage_rollup_day d USING (SELECT DISTINCT zone, day FROM gone) g
  WHERE d.zone = g.zone AND d.day = g.day;
  RETURN NULL;
END $$;
CREATE TRIGGER agent_usage_rollup_forget_days AFTER DELETE ON agent_usage_rollup
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
  EXECUTE FUNCTION agent_usage_rollup_forget_days();
"""
FORGET_NOT = """
DROP TRIGGER IF EXISTS agent_usage_rollup_forget_days ON agent_usage_rollup;
DROP FUNCTION IF EXISTS agent_usage_rollup_forget_days();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0012_run_full_text_search"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageMark",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("zone", models.TextField(unique=True)),
                ("refreshed_at", models.DateTimeField()),
            ],
            options={
                "db_table": "agent_usage_rollup_mark",
            },
        ),
        migrations.CreateModel(
            name="UsageDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("runs", models.IntegerField()),
                ("succeeded", models.IntegerField()),
                ("halted", models.IntegerField()),
                ("failed", models.IntegerField()),
                ("cancelled", models.IntegerField()),
                ("tool_calls", models.BigIntegerField()),
                ("tool_failures", models.IntegerField()),
                ("breaker_trips", models.IntegerField()),
                ("prompt_tokens", models.BigIntegerField()),
                ("completion_tokens", models.BigIntegerField()),
                ("zone", models.TextField()),
                ("day", models.DateField()),
                ("users", models.IntegerField()),
            ],
            options={
                "db_table": "agent_usage_rollup_day",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("zone", "day"), name="agent_usage_rollup_day_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsageGroup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("runs", models.IntegerField()),
                ("succeeded", models.IntegerField()),
                ("halted", models.IntegerField()),
                ("failed", models.IntegerField()),
                ("cancelled", models.IntegerField()),
                ("tool_calls", models.BigIntegerField()),
                ("tool_failures", models.IntegerField()),
                ("breaker_trips", models.IntegerField()),
                ("prompt_tokens", models.BigIntegerField()),
                ("completion_tokens", models.BigIntegerField()),
                ("zone", models.TextField()),
                ("day", models.DateField()),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "agent_usage_rollup",
                "indexes": [
                    models.Index(fields=["zone", "user", "day"], name="agent_usage_rollup_user_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("zone", "day", "user"), name="agent_usage_rollup_key"
                    )
                ],
            },
        ),
        migrations.RunSQL(FORGET_DAYS, FORGET_NOT),
    ]
