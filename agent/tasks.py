"""Runs as Django tasks: `manage.py db_worker` processes (any number, any machine) work them."""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from django_tasks import task

from agent.events import RunStatus
from agent.models import AgentRun
from agent.services import execute_run

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@task()
def work_run(run_id: int) -> str:
    """Work a queued run to its end; one cancelled before it started has nothing left to do."""
    run = AgentRun.objects.get(pk=run_id)
    if run.status != RunStatus.QUEUED:
        return run.status
    with interrupted_by_stop_signals():
        return execute_run(run).status


@contextmanager
def interrupted_by_stop_signals() -> Iterator[None]:
    """Ctrl-C or SIGTERM ends the run now, recorded as interrupted, instead of the worker's
    default of waiting for the run to finish; then the worker gets the signal to stop too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in received[:1]:
            signal.raise_signal(signum)
