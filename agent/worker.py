"""How a `manage.py db_worker` process stops while it works a run: at the run's next check."""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WorkerStopping(KeyboardInterrupt):
    """The worker was told to stop: the run ends, recorded as interrupted, at its next check."""


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
