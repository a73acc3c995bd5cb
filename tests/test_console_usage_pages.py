"""The usage page over a long range (console/selectors.py, UsagePages): summed per day in one
query, read per user only for the days a page shows, and the same rows and totals as reading
every row (`usage`) would give, on every page."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from agent.models import AgentRun, BreakerTrip, ToolExecution
from console import rollup
from console.selectors import UsagePages, usage, usage_totals
from core.events import RunStatus

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
                tool_call(run, step, status)
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


# The rollup (console/rollup.py) the pages read is kept by the page's reads: whatever the runs
# did between two reads, the page shows what reading every run (`usage`) shows.

ZONES = ("UTC", "Pacific/Kiritimati", "America/Adak")


def assert_pages_are_every_row(since, until, user_id=None):
    every = usage(since, until, user_id)
    pages = UsagePages(since, until, user_id)
    assert seen(pages[0 : len(pages) + 1]) == seen(every)
    assert [row.username for row in pages[0 : len(pages)]] == [row.username for row in every]
    assert pages.totals() == usage_totals(every)
    return every


def a_run(person, days_ago=0, **figures):
    """A run as the engine makes one: queued, then moved to a day of the past if asked."""
    run = AgentRun.objects.create(user=person, task="t", provider="mock", model="mock", **figures)
    if days_ago:
        AgentRun.objects.filter(pk=run.pk).update(
            created_at=timezone.now() - timedelta(days=days_ago)
        )
    return run


def end(run, status=RunStatus.SUCCEEDED, finished_at=None, **figures):
    """The run's end as the recorder writes it (agent/recorder.py, write_end)."""
    AgentRun.objects.filter(pk=run.pk).update(
        status=status, finished_at=finished_at or timezone.now(), **figures
    )


def tool_call(run, step=1, status="error"):
    """A tool call the run made, as its audit row (a failed one unless `status` says)."""
    ToolExecution.objects.create(
        run=run,
        step=step,
        call_id=f"c{step}",
        tool="run_code",
        arguments="{}",
        status=status,
        duration=0.1,
    )


@pytest.mark.parametrize("zone", ZONES)
def test_a_run_of_a_past_day_that_ends_between_two_reads_shows_its_end(a_month_of_runs, zone):
    person = a_month_of_runs[0]
    until = timezone.localdate()
    since = until - timedelta(days=40)
    with timezone.override(zone):
        run = a_run(person, days_ago=3, status=RunStatus.RUNNING)
        before = assert_pages_are_every_row(since, until)
        tool_call(run)
        BreakerTrip.objects.create(run=run, step=1, tool="run_code", reason="tool_failures")
        end(run, RunStatus.HALTED, tool_calls=1, prompt_tokens=500, completion_tokens=7)
        after = assert_pages_are_every_row(since, until)
        assert usage_totals(after)["halted"] == usage_totals(before)["halted"] + 1
        assert_pages_are_every_row(since, until, person.pk)


def test_a_run_that_ended_just_before_the_last_read_is_seen_at_the_next(a_month_of_runs):
    """A worker's clock a little behind the database's, or an end that committed while the
    page was being read: its `finished_at` is before that read, and still counts at the next."""
    person = a_month_of_runs[1]
    until = timezone.localdate()
    since = until - timedelta(days=40)
    run = a_run(person, days_ago=5, status=RunStatus.RUNNING)
    read_at = timezone.now()
    assert_pages_are_every_row(since, until)
    end(run, RunStatus.FAILED, finished_at=read_at - timedelta(seconds=30), tool_calls=4)
    assert_pages_are_every_row(since, until)


def test_a_continued_run_counts_as_live_again_then_with_its_new_end(a_month_of_runs):
    person = a_month_of_runs[2]
    until = timezone.localdate()
    since = until - timedelta(days=40)
    run = a_run(person, days_ago=8, status=RunStatus.RUNNING)
    end(run, RunStatus.HALTED, tool_calls=2, prompt_tokens=10)
    assert_pages_are_every_row(since, until)
    # As agent/runs.py continues a run: queued again, its end cleared.
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED, finished_at=None)
    live = assert_pages_are_every_row(since, until)
    assert usage_totals(live)["runs"] > sum(usage_totals(live)[s] for s in STATUSES)
    tool_call(run, step=3)
    end(run, RunStatus.SUCCEEDED, tool_calls=5, prompt_tokens=900)
    assert_pages_are_every_row(since, until)


def test_runs_made_today_show_as_they_go(a_month_of_runs):
    person = a_month_of_runs[3]
    today = timezone.localdate()
    assert_pages_are_every_row(today, today)
    run = a_run(person)
    assert_pages_are_every_row(today, today)
    end(run, tool_calls=1)
    assert_pages_are_every_row(today - timedelta(days=40), today)


def test_runs_deleted_in_the_console_and_a_deleted_user_leave_the_figures(
    a_month_of_runs, client, operator
):
    until = timezone.localdate()
    since = until - timedelta(days=40)
    assert_pages_are_every_row(since, until)
    gone = list(AgentRun.objects.filter(user=a_month_of_runs[0]).order_by("pk")[:3])
    response = client.post(
        reverse("admin:agent_agentrun_changelist"),
        {"action": "delete_selected", "_selected_action": [r.pk for r in gone], "post": "yes"},
    )
    assert response.status_code == 302
    assert not AgentRun.objects.filter(pk__in=[r.pk for r in gone]).exists()
    assert_pages_are_every_row(since, until)
    one = AgentRun.objects.filter(user=a_month_of_runs[1]).first()
    client.post(reverse("admin:agent_agentrun_delete", args=[one.pk]), {"post": "yes"})
    assert not AgentRun.objects.filter(pk=one.pk).exists()
    assert_pages_are_every_row(since, until)
    a_month_of_runs[2].delete()
    assert_pages_are_every_row(since, until)


def test_the_rollup_summed_again_from_nothing_is_the_same(a_month_of_runs):
    until = timezone.localdate()
    since = until - timedelta(days=40)
    assert_pages_are_every_row(since, until)
    rollup.rebuild()  # what an operator may do after deleting runs outside the console
    assert_pages_are_every_row(since, until)
    assert_pages_are_every_row(since, until, a_month_of_runs[3].pk)


def test_a_day_with_no_runs_is_summed_once_and_shows_nothing(a_month_of_runs):
    long_ago = timezone.localdate() - timedelta(days=400)
    for _ in range(2):
        pages = UsagePages(long_ago, long_ago)
        assert len(pages) == 0
        assert pages.totals() == usage_totals([])
