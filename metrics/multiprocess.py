"""Every process of the site (daphne's, each worker's) counts in files of its own in one
directory, prometheus-client's multiprocess mode; a scrape of any web process adds them all up.

Counters of a process that ended stay in the directory: their sum never goes back, which
Prometheus would read as a reset. The directory is emptied when the whole site starts (`make
run`), never while any of it runs. No series here is a gauge of a live process (the state of runs
and approvals is read from the database at each scrape: metrics.collector), so there is nothing
of a dead process to take back (`mark_process_dead` clears only such gauges).
"""

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

ENVIRONMENT = "PROMETHEUS_MULTIPROC_DIR"


def count_in(directory: Path) -> None:
    """From now on, this process's series are kept in `directory` (before any is made: a
    series' first value opens its process's file). Its children inherit the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENVIRONMENT] = str(directory)
    # prometheus-client picks its kind of value as it is imported, from the environment; the
    # settings are read later, so it is picked again here (once: two would share one file).
    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


def exposition(directory: Path, *collectors: Collector) -> bytes:
    """Every process's series in `directory`, and `collectors`' (read now), as Prometheus'
    text format."""
    directory.mkdir(parents=True, exist_ok=True)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
