"""Runs of one person at once against a token quota, worked by a real worker process: each asks
the ledger before each model turn, so together they overspend by at most the turn each had
under way when the quota was reached (accounting/quotas.py)."""

import pytest
from django.db.models import F, Max, Sum

from accounting.models import Charge, ChargeKind
from agent.models import FINISHED, AgentRun
from agent.runs import new_conversation, submit_run
from core.events import HaltReason
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 20
LIMIT = 60_000  # tokens: a few turns of each run, far less than their whole tasks
QUOTA = f"tokens={LIMIT}/day"


def test_twenty_runs_at_once_overspend_a_token_quota_by_at_most_one_turn_each(
    settings, alice, start_worker
):
    settings.LOOP_QUOTA = QUOTA
    settings.LOOP_USER_ACTIVE_RUNS = RUNS
    runs = [
        submit_run(alice, "Count slowly to 12", new_conversation(alice), model="mock")
        for _ in range(RUNS)
    ]
    start_worker(
        "--concurrency",
        str(RUNS),
        LOOP_QUOTA=QUOTA,
        LOOP_USER_ACTIVE_RUNS=str(RUNS),
        LOOP_MOCK_LATENCY_MS="200",
    )

    wait_for(
        lambda: (
            AgentRun.objects.filter(pk__in=[r.pk for r in runs], status__in=FINISHED).count()
            == RUNS
        ),
        "all twenty runs to end",
        timeout=300,
    )

    turns = Charge.objects.filter(user=alice, kind=ChargeKind.TURN).annotate(
        tokens=F("prompt_tokens") + F("completion_tokens")
    )
    figures = turns.aggregate(total=Sum("tokens"), largest=Max("tokens"))
    assert figures["total"] >= LIMIT  # the quota was reached ...
    assert figures["total"] <= LIMIT + RUNS * figures["largest"]  # ... and barely passed
    halted = AgentRun.objects.filter(pk__in=[r.pk for r in runs], halt_reason=HaltReason.QUOTA)
    # It is the quota that ended them (a snippet failing under the load may end one sooner).
    assert halted.count() >= RUNS // 2
