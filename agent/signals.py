"""What the agent app tells the apps above it, which it does not import: Django signals, each
connected in its receiver's AppConfig.ready().

`stop_requested`, with `run_id`: a Stop reached a live run. A receiver that ends the run itself
(approvals: a run that waits for decisions, which no worker holds) returns True; agent.runs ends
the run otherwise."""

from django.dispatch import Signal

stop_requested = Signal()
