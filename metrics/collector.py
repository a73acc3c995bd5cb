"""What is the database's state, read at each scrape, so every web process says the same: the
live runs by status and worker, the queue's oldest run, the calls waiting for a decision, and
the database's sessions. Three queries, each on an index or a small system view."""

import logging
from collections.abc import Iterator
from datetime import datetime

from django.db import DatabaseError, connection
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from agent.models import AgentRun
from approvals.models import WAITING, ApprovalRequest
from core.events import RunStatus

logger = logging.getLogger(__name__)

# The statuses a run passes through; the ended ones are counted as they end
# (loop_runs_finished_total): counting them here would read the whole table at every scrape.
LIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)

SESSIONS = """
    SELECT coalesce(state, 'other'), count(*) FROM pg_stat_activity
    WHERE datname = current_database() GROUP BY 1
"""


class DatabaseState(Collector):
    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "loop_database_up", "Whether this scrape could read the database (1) or not (0)."
        )
        try:
            families = [*runs(), *approvals(), sessions()]
        except DatabaseError as error:
            logger.warning("/metrics: the database could not be read: %s", error)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


def runs() -> list[Metric]:
    by_status = GaugeMetricFamily(
        "loop_runs",
        "Live runs now, by status (queued, running, awaiting_approval).",
        labels=["status"],
    )
    by_worker = GaugeMetricFamily(
        "loop_worker_runs", "Runs each worker is working now.", labels=["worker"]
    )
    oldest = GaugeMetricFamily(
        "loop_queue_oldest_seconds", "How long the oldest queued run has waited (0: none waits)."
    )
    counts = dict.fromkeys(LIVE, 0)
    queued_since: datetime | None = None
    rows = (
        AgentRun.objects.filter(status__in=LIVE)
        .order_by()
        .values_list("status", "worker")
        .annotate(runs=Count("id"), since=Min("created_at"))
    )
    for status, worker, count, since in rows:
        counts[status] += count
        if status == RunStatus.RUNNING:
            by_worker.add_metric([worker], count)
        if status == RunStatus.QUEUED:
            queued_since = min(filter(None, (queued_since, since)))
    for status, count in counts.items():
        by_status.add_metric([str(status)], count)
    oldest.add_metric([], age(queued_since))
    return [by_status, by_worker, oldest]


def approvals() -> list[Metric]:
    waiting = ApprovalRequest.objects.filter(decision=WAITING).aggregate(
        calls=Count("id"), since=Min("created_at")
    )
    count = GaugeMetricFamily(
        "loop_approvals_waiting", "Tool calls waiting for their person's decision now."
    )
    count.add_metric([], waiting["calls"])
    oldest = GaugeMetricFamily(
        "loop_approvals_oldest_waiting_seconds",
        "How long the call waiting longest for a decision has waited (0: none waits).",
    )
    oldest.add_metric([], age(waiting["since"]))
    return [count, oldest]


def sessions() -> Metric:
    family = GaugeMetricFamily(
        "loop_database_connections",
        "Sessions open on Loop's database, from every process, by state: active (a statement"
        " running), idle (kept by a pool), idle in transaction, ...",
        labels=["state"],
    )
    with connection.cursor() as cursor:
        cursor.execute(SESSIONS)
        for state, count in cursor.fetchall():
            family.add_metric([state], count)
    return family


def age(since: datetime | None) -> float:
    return 0.0 if since is None else max(0.0, (timezone.now() - since).total_seconds())
