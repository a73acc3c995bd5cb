from django.db import models

from agent.models import AgentRun


class RunOrigin(models.Model):
    """The span that was current where a run was submitted (a web request's, or its caller's
    as its `traceparent` header said): the run's first `invoke_agent` span links to it. Written
    in the run's own transaction, only when traces are on and there was such a span."""

    run = models.OneToOneField(
        AgentRun, on_delete=models.CASCADE, primary_key=True, related_name="trace_origin"
    )
    trace_id = models.CharField(max_length=32)  # hex, as W3C trace context writes it
    span_id = models.CharField(max_length=16)

    def __str__(self) -> str:
        return f"Run {self.run_id} from trace {self.trace_id}"
