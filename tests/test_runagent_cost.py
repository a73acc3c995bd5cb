"""runagent and the API say what a run cost: its closing line and JSON end in the terminal, its
representation in the API; "price unknown" (null) when its model has no price."""

import json
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounting.ledger import spend_of_run
from accounting.models import Price
from accounting.reports import amount_text
from agent.models import AgentRun

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

TASK = "What is 17 * 23?"


def runagent(*args: str) -> str:
    out = StringIO()
    call_command("runagent", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def price() -> Price:
    return Price.objects.create(
        model="mock",
        input=Decimal("0.59"),
        output=Decimal("0.79"),
        effective_from=timezone.now() - timedelta(days=1),
    )


def test_the_closing_line_shows_the_cost_after_the_tokens(price):
    closing = runagent(TASK).splitlines()[-1]
    run = AgentRun.objects.get()
    cost = spend_of_run(run.pk).cost_in("USD")
    assert cost > 0
    tokens = run.prompt_tokens + run.completion_tokens
    assert f", {tokens} tokens, {amount_text(cost)} USD, " in closing
    assert closing.startswith(f"Run {run.pk} succeeded after ")


def test_the_closing_line_says_price_unknown_without_a_price():
    closing = runagent(TASK).splitlines()[-1]
    assert " tokens, price unknown, " in closing


def test_the_json_end_carries_the_cost_as_a_decimal_string(price):
    end = json.loads(runagent(TASK, "--json").splitlines()[-1])
    run = AgentRun.objects.get()
    assert end["kind"] == "run_finished"
    assert end["cost"] == amount_text(spend_of_run(run.pk).cost_in("USD"))
    assert Decimal(end["cost"]) == spend_of_run(run.pk).cost_in("USD")
    assert (end["currency"], end["price_unknown"]) == ("USD", False)


def test_the_json_end_says_price_unknown_without_a_price():
    end = json.loads(runagent(TASK, "--json").splitlines()[-1])
    assert (end["cost"], end["currency"], end["price_unknown"]) == (None, None, True)


def test_the_api_shows_a_runs_cost(alice_key, price, client):
    runagent(TASK, "--user=alice")
    run = AgentRun.objects.get()
    headers = {"Authorization": f"Bearer {alice_key}"}
    shown = client.get(f"/api/v1/runs/{run.pk}", headers=headers).json()
    cost = spend_of_run(run.pk).cost_in("USD")
    assert (shown["cost"], shown["currency"], shown["price_unknown"]) == (
        amount_text(cost),
        "USD",
        False,
    )
    listed = client.get("/api/v1/runs", headers=headers).json()
    assert [(r["id"], r["cost"], r["currency"]) for r in listed] == [(run.pk, shown["cost"], "USD")]


def test_the_api_shows_null_and_price_unknown_without_a_price(alice_key, client):
    runagent(TASK, "--user=alice")
    run = AgentRun.objects.get()
    headers = {"Authorization": f"Bearer {alice_key}"}
    shown = client.get(f"/api/v1/runs/{run.pk}", headers=headers).json()
    assert (shown["cost"], shown["currency"], shown["price_unknown"]) == (None, None, True)
