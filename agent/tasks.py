"""Runs as Django tasks: `manage.py db_worker` processes (any number, any machine) work them."""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from django_tasks import task

from agent.events import RunStatus
from agent.models import AgentRun
from agent.services import execute_run

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WorkerStopping(KeyboardInterrupt):
    """The worker was told to stop: the run ends, recorded as interrupted, at its next check."""


@task()
def work_run(run_id: int) -> str:
    """Work a queued run to its end; one cancelled before it started has nothing left to do."""
    run = AgentRun.objects.get(pk=run_id)
    if run.status != RunStatus.QUEUED:
        return run.status
    with stop_signals_interrupt() as stopping:
        try:
            return execute_run(run, cancelled=stopping).status
        except WorkerStopping:  # recorded as interrupted; the worker stops next
            return RunStatus.INTERRUPTED


@contextmanager
def stop_signals_interrupt() -> Iterator[Callable[[], bool]]:
    """Ctrl-C or SIGTERM ends the run at its next check (before a model or tool call, never in
    the middle of a database write), instead of the worker's default of waiting for the run to
    finish; a second signal forces it at once. Then the worker gets the signal to stop too."""
    received: list[int] = []

    def stopping() -> bool:
        if received:
            raise WorkerStopping
        return False

    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 1:
            raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield stopping
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in received[:1]:
            signal.raise_signal(signum)
