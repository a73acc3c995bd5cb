"""The audit record of every tool call a run made (or was refused)."""

from django.db import models

from tools.base import ToolStatus


class ToolExecution(models.Model):
    run = models.ForeignKey(
        "agent.AgentRun", on_delete=models.CASCADE, related_name="tool_executions"
    )
    step = models.PositiveIntegerField()
    call_id = models.CharField(max_length=128)
    tool = models.CharField(max_length=64)
    arguments = models.TextField()
    status = models.CharField(
        max_length=16, choices=[(s.value, s.value.capitalize()) for s in ToolStatus]
    )
    # What the model saw: the output of a call that worked, the error of one that did not.
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)
    duration = models.FloatField()
    policy = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"]), models.Index(fields=["tool", "status"]))

    def __str__(self) -> str:
        return f"{self.tool} ({self.status}) in run {self.run_id} step {self.step}"
