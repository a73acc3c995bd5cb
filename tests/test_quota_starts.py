"""Starts of one person at once against a runs quota: the check and the start's charge are one
atomic step (accounting.quotas.reached_before_start, in the start's transaction), so exactly as
many start as the quota has places."""

import threading

import pytest
from django.db import connection

from accounting.models import Charge, ChargeKind
from agent import runs
from agent.models import AgentRun

pytestmark = pytest.mark.django_db(transaction=True)

PLACES = 3
TRIES = 10


def test_ten_starts_at_once_take_exactly_the_quotas_three_places(settings, alice):
    settings.LOOP_QUOTA = f"runs={PLACES}/day"
    settings.LOOP_USER_ACTIVE_RUNS = TRIES
    ready = threading.Barrier(TRIES)
    outcomes: list[str] = []

    def start(n: int) -> None:
        try:
            ready.wait()
            runs.start_run(alice, f"What is {n} + 1?", model="mock")
            outcomes.append("started")
        except runs.QuotaReached:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(n,)) for n in range(TRIES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["refused"] * (TRIES - PLACES) + ["started"] * PLACES
    assert AgentRun.objects.filter(user=alice).count() == PLACES
    assert Charge.objects.filter(user=alice, kind=ChargeKind.RUN).count() == PLACES
