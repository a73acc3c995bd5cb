"""The tables of the usage page's rollup (console/rollup.py, which alone reads and writes them,
in SQL): what each user's runs of each day did, per time zone. Models only so that Django knows
the tables: a user's rows go with the user, and a test database's flush empties them with the
runs. Registered through agent/models.py."""

from django.conf import settings
from django.db import models


class UsageFigures(models.Model):
    runs = models.IntegerField()
    succeeded = models.IntegerField()
    halted = models.IntegerField()
    failed = models.IntegerField()
    cancelled = models.IntegerField()
    tool_calls = models.BigIntegerField()
    tool_failures = models.IntegerField()
    breaker_trips = models.IntegerField()
    prompt_tokens = models.BigIntegerField()
    completion_tokens = models.BigIntegerField()

    class Meta:
        abstract = True


class UsageGroup(UsageFigures):
    """One user's runs of one day (in `zone`), summed."""

    zone = models.TextField()
    day = models.DateField()
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")

    class Meta:
        db_table = "agent_usage_rollup"
        constraints = (
            models.UniqueConstraint(fields=["zone", "day", "user"], name="agent_usage_rollup_key"),
        )
        indexes = (
            models.Index(fields=["zone", "user", "day"], name="agent_usage_rollup_user_idx"),
        )

    def __str__(self) -> str:
        return f"{self.user_id} on {self.day} ({self.zone}): {self.runs} runs"


class UsageDay(UsageFigures):
    """A day (in `zone`) the rollup has summed, with its users' groups summed (`users`: how
    many), empty or not."""

    zone = models.TextField()
    day = models.DateField()
    users = models.IntegerField()

    class Meta:
        db_table = "agent_usage_rollup_day"
        constraints = (
            models.UniqueConstraint(fields=["zone", "day"], name="agent_usage_rollup_day_key"),
        )

    def __str__(self) -> str:
        return f"{self.day} ({self.zone}): {self.users} users, {self.runs} runs"


class UsageMark(models.Model):
    """When the rollup of `zone` was last brought up to date."""

    zone = models.TextField(unique=True)
    refreshed_at = models.DateTimeField()

    class Meta:
        db_table = "agent_usage_rollup_mark"

    def __str__(self) -> str:
        return f"{self.zone}: {self.refreshed_at}"
