"""Quotas over a period (accounting/quotas.py): a run is refused before it starts once a quota is
reached (in the chat, the API and runagent), a run halts `quota` before the model turn that would
go past one, with its progress, and goes on after the reset; every applicable quota is checked
(the site's, the person's groups', their own), so the tightest wins."""

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from accounting.models import Charge, ChargeKind, Measure, Period, Quota, Window
from accounting.quotas import standings
from agent import runs
from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from core.events import HaltReason, RunFinished, RunStatus
from core.llm import Usage
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

TASK = "List the files, twice"


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    """A person here has several runs going at once (no worker takes them), and sends as fast
    as the test does."""
    settings.LOOP_USER_ACTIVE_RUNS = 50
    settings.LOOP_SEND_RATE_PER_MINUTE = 0


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def turn(tokens: int, final: str = "") -> object:
    usage = Usage(prompt_tokens=tokens - 10, completion_tokens=10)
    return answer(final, usage=usage) if final else call("list_files", {}, usage=usage)


def worked(run: AgentRun, *replies: object) -> AgentRun:
    return execute_run(run, llm=ScriptedLLM(list(replies)))


def end_of(run: AgentRun) -> RunFinished:
    return run.events.filter(kind=RunFinished.kind).last().event


def test_the_chat_refuses_a_start_past_the_runs_quota_and_keeps_the_typed_text(
    settings, as_alice, alice
):
    settings.LOOP_QUOTA = "runs=2/day"
    for n in range(2):
        assert as_alice.post("/send/", {"task": f"What is {n} + 1?"}).status_code == 302

    refused = as_alice.post("/send/", {"task": "What is 9 + 1?"})

    assert refused.status_code == 400
    page = refused.content.decode()
    assert "You have reached the site&#x27;s quota of 2 runs a day (2 runs used)" in page
    tomorrow = timezone.localdate() + timedelta(days=1)
    assert f"It resets at {tomorrow:%Y-%m-%d} 00:00 UTC." in page
    assert ">What is 9 + 1?</textarea>" in page  # what was typed stays
    assert AgentRun.objects.filter(user=alice).count() == 2
    assert Charge.objects.filter(user=alice, kind=ChargeKind.RUN).count() == 2


def test_the_api_refuses_a_start_past_the_quota_with_429_and_retry_after(
    settings, client, alice, alice_key
):
    settings.LOOP_QUOTA = "runs=1/day"
    start = {"task": "What is 2 + 2?"}
    first = client.post("/api/v1/runs", start, content_type="application/json", **bearer(alice_key))
    assert first.status_code == 201

    refused = client.post(
        "/api/v1/runs", start, content_type="application/json", **bearer(alice_key)
    )

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_reached"
    assert "quota of 1 run a day" in refused.json()["error"]["message"]
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    until_reset = (midnight + timedelta(days=1) - timezone.now()).total_seconds()
    assert 0 < int(refused["Retry-After"]) - until_reset <= 2
    assert AgentRun.objects.filter(user=alice).count() == 1


def test_the_api_reports_where_the_person_stands(settings, client, alice, alice_key):
    settings.LOOP_QUOTA = "runs=3/rolling-week,tokens=1000/day"
    runs.start_run(alice, "What is 2 + 2?", model="mock")

    shown = client.get("/api/v1/quota", **bearer(alice_key)).json()

    assert [(q["measure"], q["limit"], q["used"], q["remaining"], q["reached"]) for q in shown] == [
        ("runs", "3", "1", "2", False),
        ("tokens", "1000", "0", "1000", False),
    ]
    assert (shown[0]["rolling"], shown[0]["source"]) == (True, "the site's")


def test_runagent_refuses_a_start_past_the_quota_and_exits_non_zero(settings, workspaces):
    settings.LOOP_QUOTA = "runs=1/day"
    out = StringIO()
    call_command("runagent", "What is 2 + 2?", "--json", stdout=out, stderr=StringIO())
    end = [line for line in out.getvalue().splitlines() if '"run_finished"' in line][-1]
    assert '"quota": [{"measure": "runs", "limit": "1", "used": "1", "remaining": "0"' in end

    with pytest.raises(CommandError, match="quota of 1 run a day") as refused:
        call_command("runagent", "What is 3 + 3?", stdout=StringIO(), stderr=StringIO())

    assert refused.value.returncode == 2
    assert AgentRun.objects.count() == 1


def test_runagents_closing_lines_say_what_is_left(settings, workspaces):
    settings.LOOP_QUOTA = "runs=5/week"
    out = StringIO()
    call_command("runagent", "What is 2 + 2?", stdout=out, stderr=StringIO())
    assert "Quota (the site's): 4 runs left of 5 runs a week; resets at " in out.getvalue()


def test_a_run_halts_before_the_turn_past_the_token_quota_then_goes_on_after_the_reset(
    settings, alice
):
    # Its own start reaches the runs quota: that holds back other starts, not its turns, nor
    # its Continue (the same run goes on).
    settings.LOOP_QUOTA = "runs=1/day,tokens=100/day"
    run = runs.start_run(alice, TASK, model="mock")

    run = worked(run, turn(60), turn(60), turn(60, "never asked"))

    assert (run.status, run.halt_reason, run.iterations) == ("halted", HaltReason.QUOTA, 2)
    assert run.tool_executions.count() == 2  # its progress is kept
    end = end_of(run)
    assert end.detail.startswith("it reached the site's quota of 100 tokens a day (120 tokens")
    assert "it resets at " in end.detail
    with pytest.raises(runs.QuotaReached):
        runs.continue_run(alice, run.pk)

    # The day is over: what it used counts no more.
    Charge.objects.filter(user=alice, kind=ChargeKind.TURN).update(
        at=timezone.now() - timedelta(days=2)
    )
    run = worked(runs.continue_run(alice, run.pk), turn(30, "Two lists of no files."))

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Two lists of no files.")
    assert Charge.objects.filter(run_id=run.pk, kind=ChargeKind.RUN).count() == 1


def test_a_quota_halt_in_the_chat_says_what_was_reached_and_to_continue_after_the_reset(
    settings, as_alice, alice
):
    settings.LOOP_QUOTA = "tokens=50/day"
    conversation = runs.new_conversation(alice)
    worked(runs.start_run(alice, TASK, model="mock", conversation=conversation), turn(60), turn(60))

    page = as_alice.get(f"/c/{conversation.pk}/").content.decode()

    assert "Halted: it reached the site&#x27;s quota of 50 tokens a day (60 tokens used)" in page
    assert "Continue it once the quota resets" in page
    assert "⚠ Reached: 0 tokens left of 50 tokens a day" in page


def test_the_tightest_quota_wins_a_groups_and_a_persons_own(settings, alice, bob):
    settings.LOOP_QUOTA = "runs=10/day"
    trial = Group.objects.create(name="trial")
    alice.groups.add(trial)
    Quota.objects.create(group=trial, measure=Measure.RUNS, limit=1, period=Period.DAY)
    # A person's own quota, looser than the group's, does not lift it.
    Quota.objects.create(user=alice, measure=Measure.RUNS, limit=5, period=Period.DAY)

    runs.start_run(alice, "What is 1 + 1?", model="mock")
    with pytest.raises(runs.QuotaReached, match="the group trial's quota of 1 run a day"):
        runs.start_run(alice, "What is 2 + 2?", model="mock")
    for n in range(2):  # bob is in no group: the site's quota is his
        runs.start_run(bob, f"What is {n} + 3?", model="mock")

    Quota.objects.create(user=bob, measure=Measure.RUNS, limit=2, period=Period.WEEK)
    with pytest.raises(runs.QuotaReached, match="your quota of 2 runs a week"):
        runs.start_run(bob, "What is 4 + 4?", model="mock")
    assert [s.limit.source for s in standings(alice.pk)] == [
        "the site's",
        "the group trial's",
        "yours",
    ]


def test_a_cost_quota_counts_priced_turns_in_its_currency(settings, alice):
    settings.LOOP_PRICES = '{"mock": {"input": 1000, "output": 1000, "currency": "EUR"}}'
    Quota.objects.create(
        user=alice, measure=Measure.COST, limit=Decimal("0.1"), currency="EUR", period=Period.MONTH
    )
    run = worked(runs.start_run(alice, TASK, model="mock"), turn(60), turn(60), turn(60, "x"))

    assert (run.status, run.halt_reason) == ("halted", HaltReason.QUOTA)
    assert "your quota of 0.1 EUR a month (0.12 EUR used)" in end_of(run).detail


def test_a_rolling_window_resets_as_the_oldest_start_falls_out_of_it(settings, alice):
    settings.LOOP_QUOTA = "runs=1/rolling-day"
    first = runs.start_run(alice, "What is 1 + 1?", model="mock")
    started = timezone.now() - timedelta(hours=23)
    Charge.objects.filter(run_id=first.pk).update(at=started)

    with pytest.raises(runs.QuotaReached) as refused:
        runs.start_run(alice, "What is 2 + 2?", model="mock")
    assert refused.value.standing.resets_at == started + timedelta(days=1)

    Charge.objects.filter(run_id=first.pk).update(at=started - timedelta(hours=2))
    runs.start_run(alice, "What is 2 + 2?", model="mock")


def test_a_week_starts_on_monday_and_a_month_on_its_first_in_the_sites_time_zone(settings, alice):
    Quota.objects.create(user=alice, measure=Measure.RUNS, limit=9, period=Period.WEEK)
    Quota.objects.create(
        user=alice, measure=Measure.RUNS, limit=9, period=Period.MONTH, window=Window.CALENDAR
    )
    week, month = standings(alice.pk)
    today = timezone.localdate()
    next_monday = today + timedelta(days=7 - today.weekday())
    assert timezone.localtime(week.resets_at).date() == next_monday
    assert timezone.localtime(month.resets_at).date() == (
        today.replace(day=28) + timedelta(days=4)
    ).replace(day=1)


def test_the_composer_shows_what_is_left_and_when_it_resets(settings, as_alice, alice):
    settings.LOOP_QUOTA = "runs=4/day"
    runs.start_run(alice, "What is 1 + 1?", model="mock")

    page = as_alice.get("/").content.decode()

    assert '<ul class="run-quota" id="run-quota" aria-label="Your quotas">' in page
    assert 'value="0.250"' in page
    assert "3 runs left of 4 runs a day" in page


def test_a_send_redraws_the_gauge(settings, as_alice, alice):
    settings.LOOP_QUOTA = "runs=4/day"
    conversation = runs.new_conversation(alice)

    sent = as_alice.post(
        f"/c/{conversation.pk}/send/", {"task": "What is 1 + 1?"}, HTTP_HX_REQUEST="true"
    )

    assert 'id="run-quota" aria-label="Your quotas" hx-swap-oob="true"' in sent.content.decode()
    assert "3 runs left of 4 runs a day" in sent.content.decode()


def test_no_quota_no_gauge(as_alice):
    assert 'id="run-quota"' not in as_alice.get("/").content.decode()


def test_the_console_lists_quotas_and_shows_the_sites_read_only(settings, client, operator):
    settings.LOOP_QUOTA = "tokens=5000/rolling-week"
    Quota.objects.create(
        group=Group.objects.create(name="trial"), measure=Measure.RUNS, limit=3, period="day"
    )

    page = client.get("/admin/accounting/quota/").content.decode()

    assert "The site's quotas (LOOP_QUOTA, read-only)" in page
    assert "5,000 tokens in 7 days" in page
    assert "group trial: runs 3" in page


def test_a_bad_loop_quota_fails_the_system_check(manage):
    checked = manage("check", env={"LOOP_QUOTA": "runs=50/year"})
    assert checked.returncode != 0
    assert "accounting.E002" in checked.stderr
    assert "no period 'year'" in checked.stderr


def test_the_apis_continue_of_a_run_halted_on_a_quota_is_429_until_the_reset(
    settings, client, alice, alice_key
):
    settings.LOOP_QUOTA = "tokens=50/rolling-day"
    run = worked(runs.start_run(alice, TASK, model="mock"), turn(60), turn(60))
    assert run.halt_reason == HaltReason.QUOTA
    turned_at = Charge.objects.get(run_id=run.pk, kind=ChargeKind.TURN).at

    refused = client.post(f"/api/v1/runs/{run.pk}/continue", **bearer(alice_key))

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_reached"
    until = (turned_at + timedelta(days=1) - timezone.now()).total_seconds()
    assert 0 <= int(refused["Retry-After"]) - until <= 2


def test_the_openai_compatible_endpoint_refuses_past_a_quota_with_retry_after(
    settings, client, alice, alice_key
):
    settings.LOOP_QUOTA = "runs=0/day"
    body = {"model": "loop", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}

    refused = client.post(
        "/v1/chat/completions", body, content_type="application/json", **bearer(alice_key)
    )

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_reached"
    assert int(refused["Retry-After"]) >= 1


def test_the_console_adds_a_groups_quota_and_refuses_half_a_run(client, operator):
    trial = Group.objects.create(name="trial")
    form = {"group": trial.pk, "measure": "runs", "limit": "2.5", "currency": "USD",
            "period": "day", "window": "rolling"}  # fmt: skip

    refused = client.post("/admin/accounting/quota/add/", form)
    assert "runs are counted in whole numbers." in refused.content.decode()
    client.post("/admin/accounting/quota/add/", {**form, "limit": "2"})

    assert Quota.objects.get().limit == 2
    # Neither a person nor a group: refused (the quota's constraint), nothing stored.
    assert client.post("/admin/accounting/quota/add/", {**form, "group": ""}).status_code == 200
    assert Quota.objects.count() == 1
