"""/metrics: off unless a token is set, then only for the token or an allowed address, with no
body that says anything to anyone else; read with Prometheus' own text parser; the database's
state read at the scrape; and counters that move as a REAL worker process works a run, read
through this (web) process, which adds every process's series up."""

import json
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.test import Client
from django.utils import timezone
from prometheus_client import Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from accounting.models import Charge
from agent.models import AgentRun
from agent.runs import new_conversation, start_run, submit_run
from approvals.models import ApprovalRequest
from core.events import RunStatus
from tests.conftest import PROJECT_DIR, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-long-random-scrape-token"
PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer
PRICES = {"mock": {"input": 1.5, "output": 6, "cached_input": 0.5, "currency": "EUR"}}
DASHBOARD = PROJECT_DIR / "docs" / "grafana-loop.json"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics_on(settings, tmp_path: Path) -> Path:
    settings.LOOP_METRICS_TOKEN = TOKEN
    settings.LOOP_METRICS_ALLOW = []
    settings.LOOP_METRICS_DIR = tmp_path / "metrics"
    return settings.LOOP_METRICS_DIR


def scrape(client: Client) -> Samples:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 for one no process has counted yet (a counter not moved)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples named so whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def test_off_without_a_token_as_if_there_were_no_such_page(client: Client, settings) -> None:
    settings.LOOP_METRICS_TOKEN = ""
    response = client.get("/metrics", headers={"Authorization": "Bearer anything"})
    assert response.status_code == 404
    assert response.content == b""


def test_off_no_run_is_heard(settings) -> None:
    """Without a token a process never signs up to hear runs: their events cost nothing."""
    from agent import observers

    settings.LOOP_METRICS_TOKEN = ""
    django_apps.get_app_config("metrics").ready()
    assert not [o for o in observers._observers if o.__module__.startswith("metrics")]


def test_refused_without_the_token_and_nothing_said(client: Client, metrics_on: Path) -> None:
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 403
    basic = client.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401
    for refused in (missing, wrong, basic):
        assert refused.content == b""
    assert client.post("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_an_allowed_address_needs_no_token_and_another_does(
    client: Client, settings, metrics_on: Path
) -> None:
    settings.LOOP_METRICS_ALLOW = ["10.0.0.0/8", "192.0.2.7"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.8").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


def test_the_database_state_is_read_at_the_scrape(client: Client, alice, metrics_on: Path) -> None:
    before = scrape(client)
    assert value(before, "loop_database_up") == 1
    assert value(before, "loop_runs", status="queued") == 0
    assert value(before, "loop_approvals_waiting") == 0
    assert ("loop_queue_oldest_seconds", frozenset()) in before
    assert total(before, "loop_database_connections") >= 1  # this test's own session at least

    conversation = new_conversation(alice)
    queued = start_run(alice, "wait in the queue", model="mock", conversation=conversation)
    working = start_run(alice, "being worked", model="mock", conversation=new_conversation(alice))
    AgentRun.objects.filter(pk=working.pk).update(status=RunStatus.RUNNING, worker="w1@host")
    request = ApprovalRequest.objects.create(
        run=working, seq=3, step=1, call_id="c1", tool="run_code", arguments="{}", digest="d"
    )
    an_hour_ago = timezone.now() - timedelta(hours=1)
    AgentRun.objects.filter(pk=queued.pk).update(created_at=an_hour_ago)
    ApprovalRequest.objects.filter(pk=request.pk).update(created_at=an_hour_ago)

    after = scrape(client)
    assert value(after, "loop_runs", status="queued") == 1
    assert value(after, "loop_runs", status="running") == 1
    assert value(after, "loop_worker_runs", worker="w1@host") == 1
    assert value(after, "loop_approvals_waiting") == 1
    assert value(after, "loop_queue_oldest_seconds") >= 3600
    assert value(after, "loop_approvals_oldest_waiting_seconds") >= 3600
    assert queued.status == RunStatus.QUEUED


def test_counters_move_as_a_worker_process_works_a_run(
    client: Client, alice, metrics_on: Path, start_worker
) -> None:
    """The run is worked in a worker process; its counters are read here, in another."""
    before = scrape(client)
    assert value(before, "loop_runs_finished_total", status="succeeded", reason="") == 0

    start_worker(
        LOOP_METRICS_TOKEN=TOKEN,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_on),
        LOOP_PRICES=json.dumps(PRICES),
    )
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: finished(run), "the worker to finish the run")
    assert run.status == RunStatus.SUCCEEDED
    # Counted once the run's end is committed, by the same thread: wait for the file to say so.
    wait_for(
        lambda: value(scrape(client), "loop_runs_finished_total", status="succeeded", reason=""),
        "the worker's counters to reach the scrape",
    )

    after = scrape(client)
    assert value(after, "loop_runs_started_total", provider=run.provider, model=run.model) == 1
    assert value(after, "loop_run_pickup_seconds_count") == 1
    assert value(after, "loop_tool_calls_total", tool="run_code", status="ok") == 1
    assert value(after, "loop_tool_call_seconds_count", tool="run_code") == 1
    labels = {"provider": run.provider, "model": run.model}
    turns = run.events.filter(kind="model_replied").count()
    assert turns >= 2
    assert value(after, "loop_model_turn_seconds_count", **labels) == turns
    assert value(after, "loop_model_tokens_total", kind="prompt", **labels) == run.prompt_tokens
    assert (
        value(after, "loop_model_tokens_total", kind="completion", **labels)
        == run.completion_tokens
    )
    ledger = sum((c.cost for c in Charge.objects.filter(run_id=run.pk, kind="turn")), Decimal(0))
    assert ledger > 0
    cost = value(after, "loop_model_cost_total", model=run.model, currency="EUR")
    assert cost == pytest.approx(float(ledger))
    assert value(after, "loop_runs", status="running") == 0


def test_a_process_that_ended_still_counts_beside_a_live_one(
    client: Client, alice, metrics_on: Path, start_worker, manage, worker_env
) -> None:
    """A run worked by a worker and one by `runagent`, a process of its own that has exited
    by the scrape: both counted, added up across the processes."""
    counting = {"LOOP_METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(metrics_on)}
    start_worker(**counting)
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: finished(run), "the worker to finish the run")
    ran = manage("runagent", "--user", "alice", PRODUCT, env=worker_env | counting)
    assert ran.returncode == 0, ran.stderr

    files = {path.name for path in metrics_on.glob("counter_*.db")}
    assert len(files) == 2, files  # the worker's and runagent's (this process counts nothing)
    succeeded = AgentRun.objects.filter(status=RunStatus.SUCCEEDED).count()
    assert succeeded == 2
    wait_for(
        lambda: total(scrape(client), "loop_runs_finished_total", status="succeeded") == 2,
        "both processes' runs to be counted",
    )
    assert total(scrape(client), "loop_runs_started_total") == 2


def finished(run: AgentRun) -> bool:
    run.refresh_from_db()
    return run.is_finished


def test_the_dashboard_names_only_exported_series(client: Client, metrics_on: Path) -> None:
    exported = exported_names()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    assert len(exprs) >= 10
    for expr in exprs:
        named = set(re.findall(r"\bloop_[a-z_]+\b", expr))
        assert named, expr
        assert named <= exported, (expr, named - exported)


def exported_names() -> set[str]:
    """Every sample name /metrics may show: the series' (with their suffixes) and the
    database's state (read now)."""
    from metrics import series
    from metrics.collector import DatabaseState

    names = set()
    families = [
        family
        for metric in vars(series).values()
        if isinstance(metric, Counter | Histogram)
        for family in metric.describe()
    ]
    for family in [*families, *DatabaseState().collect()]:
        match family.type:
            case "counter":
                names.add(f"{family.name}_total")
            case "histogram":
                names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
            case _:
                names.add(family.name)
    return names
