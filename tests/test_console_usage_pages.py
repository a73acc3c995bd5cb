"""The usage page over a long range (console/selectors.py, UsagePages): summed per day in one
query, read per user only for the days a page shows, and the same rows and totals as reading
every row (`usage`) would give, on every page."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agent.core.events import RunStatus
from agent.models import AgentRun, BreakerTrip, ToolExecution
from console.selectors import UsagePages, usage, usage_totals

pytestmark = pytest.mark.django_db

STATUSES = (RunStatus.SUCCEEDED, RunStatus.HALTED, RunStatus.FAILED, RunStatus.CANCELLED)


SEEN = ("day", "user_id", "runs", "succeeded", "halted", "failed", "cancelled", "tool_calls")
SEEN += ("tool_failures", "breaker_trips", "tokens")


def seen(rows) -> list[tuple]:
    return [tuple(getattr(row, name) for name in SEEN) for row in rows]


@pytest.fixture
def a_month_of_runs():
    """Four people's runs over 30 days, each day a different set of them, with failed and
    worked calls and breaker trips."""
    people = [User.objects.create_user(f"person{n}") for n in range(4)]
    now = timezone.now()
    for day in range(30):
        for n, person in enumerate(people):
            if (day + n) % 3 == 0:
                continue  # not everyone every day
            run = AgentRun.objects.create(
                user=person,
                task=f"day {day}",
                provider="mock",
                model="mock",
                status=STATUSES[(day + n) % 4],
                tool_calls=2,
                prompt_tokens=100 + day,
                completion_tokens=n,
            )
            AgentRun.objects.filter(pk=run.pk).update(created_at=now - timedelta(days=day))
            for step, status in enumerate(("ok", "error" if day % 2 else "timeout")):
                ToolExecution.objects.create(
                    run=run,
                    step=step,
                    call_id=f"c{step}",
                    tool="run_code",
                    arguments="{}",
                    status=status,
                    duration=0.1,
                )
            if day % 5 == 0:
                BreakerTrip.objects.create(run=run, step=1, tool="run_code", reason="tool_failures")
    return people


def test_every_page_and_the_totals_are_those_of_every_row(a_month_of_runs):
    until = timezone.localdate()
    since = until - timedelta(days=40)
    every = usage(since, until)
    pages = UsagePages(since, until)
    assert len(pages) == len(every) > 40
    assert pages.totals() == usage_totals(every)
    for size in (1, 7, 50):
        for start in range(0, len(every), size):
            assert seen(pages[start : start + size]) == seen(every[start : start + size])


def test_one_persons_pages_are_theirs_alone(a_month_of_runs):
    person = a_month_of_runs[1]
    until = timezone.localdate()
    since = until - timedelta(days=40)
    every = usage(since, until, person.pk)
    pages = UsagePages(since, until, person.pk)
    assert seen(pages[0 : len(every)]) == seen(every)
    assert pages.totals() == usage_totals(every)


def test_a_range_with_no_runs_is_empty(a_month_of_runs):
    long_ago = timezone.localdate() - timedelta(days=400)
    pages = UsagePages(long_ago, long_ago + timedelta(days=7))
    assert len(pages) == 0
    assert list(pages[0:100]) == []
