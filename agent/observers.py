"""Who hears of a run's events once they are stored: the operators' metrics, traces and
notifications (apps above this one, which sign up as they start), never the run itself.

Each observer is called in the worker's thread after the events are committed, with the run's
row (as its worker holds it) and the events just stored, in order. It must be quick (a counter,
a span, a queued job) and must not fail the run: an observer that raises is logged and the run
goes on. An event is heard in the process that recorded it, once; one recorded by a worker that
then died is heard there or nowhere (the log, not an observer, is the run's record).
"""

import logging
from collections.abc import Callable, Sequence

from agent.models import AgentRun
from core.events import Event

logger = logging.getLogger(__name__)

Observer = Callable[[AgentRun, Sequence[Event]], object]
_observers: list[Observer] = []


def observe(observer: Observer) -> None:
    """From now on, `observer` hears every run's events recorded in this process (once, however
    often it signs up)."""
    if observer not in _observers:
        _observers.append(observer)


def forget(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


def observed(run: AgentRun, events: Sequence[Event]) -> None:
    for observer in list(_observers):
        try:
            observer(run, events)
        except Exception:
            logger.exception("Run %s: an observer of its events failed", run.pk)
