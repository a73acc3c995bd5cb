"""The operators' console: runs made by real runs through the mock, seen by staff in the admin."""

import json
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from agent.runs import cancel_run, start_run
from agent.selectors import history_of
from agent.transcripts import history_from_transcript, transcripts
from console.selectors import usage
from console.widgets import run_badge, tool_badge
from core.events import HaltReason, RunStatus
from core.llm import LLMError
from core.loop import Limits
from core.results import ToolStatus
from core.wording import RUN_SYMBOLS, TOOL_SYMBOLS
from engine.execution import execute_run
from memory.models import Memory

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:agent_agentrun_changelist")
EXECUTIONS = reverse("admin:agent_toolexecution_changelist")
TRIPS = reverse("admin:agent_breakertrip_changelist")
MEMORIES = reverse("admin:memory_memory_changelist")
USAGE = reverse("admin:agent_agentrun_usage")


def run_page(run: AgentRun) -> str:
    return reverse("admin:agent_agentrun_change", args=[run.pk])


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def make_runs(alice: User, bob: User) -> dict[str, AgentRun]:
    """One run of every ending, by two users, made the way the site makes them."""
    made = {
        # The demo writes a file, so its outcome is remembered (arithmetic alone is not).
        "success": execute_run(
            start_run(alice, "Compute the sum of 1..100 and save it to a file", model="mock")
        ),
        "breaker": execute_run(
            start_run(alice, "Keep reading missing.txt until it exists", model="mock")
        ),
        "cap": execute_run(
            start_run(bob, "Save 'buy milk' to notes.txt", model="mock", limits=Limits(1))
        ),
        "failure": execute_run(
            start_run(bob, "List my files", model="mock"),
            llm=ScriptedLLM([call("list_files", {}), LLMError("Groq answered 503: overloaded")]),
        ),
        "reasoning": execute_run(
            start_run(bob, "Say hello", model="mock"),
            llm=ScriptedLLM([answer("Hello.", reasoning="The user wants a greeting.")]),
        ),
    }
    made["cancel"] = cancel_run(alice, start_run(alice, "List my files", model="mock").pk)
    # Asked about earlier work, the mock answers from the memory the first run left.
    made["recall"] = execute_run(
        start_run(alice, "What was the sum of 1..100 that I computed before?", model="mock")
    )
    return made


@dataclass(frozen=True)
class Made:
    """What the module's runs left: the ids of the two users and of each run, by its ending."""

    alice: int
    bob: int
    runs: dict[str, int]


@pytest.fixture(scope="module")
def made(module_records) -> Made:
    """The seven runs, made once for the whole module (each is a real run, sandbox and all) and
    committed, so every test reads the same records; deleted with their users at the end.

    A test runs in a transaction rolled back when it ends, so one that moves a run's date or
    adds a trip to it changes it for itself only; each gets its own instances (`runs`)."""

    def build() -> Made:
        alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
        runs = make_runs(alice, bob)
        return Made(alice.pk, bob.pk, {name: run.pk for name, run in runs.items()})

    return module_records.make(build)


@pytest.fixture
def alice(made) -> User:
    return User.objects.get(pk=made.alice)


@pytest.fixture
def bob(made) -> User:
    return User.objects.get(pk=made.bob)


@pytest.fixture
def runs(made) -> dict[str, AgentRun]:
    """The module's runs, as fresh instances for this test."""
    found = AgentRun.objects.in_bulk(made.runs.values())
    return {name: found[pk] for name, pk in made.runs.items()}


def test_the_runs_end_the_way_the_console_is_meant_to_show(runs):
    assert runs["success"].status == RunStatus.SUCCEEDED
    assert runs["breaker"].halt_reason == HaltReason.TOOL_FAILURES
    assert runs["cap"].halt_reason == HaltReason.ITERATION_CAP
    assert runs["failure"].status == RunStatus.FAILED
    assert runs["cancel"].status == RunStatus.CANCELLED
    assert runs["recall"].events.filter(kind="memories_recalled").exists()


def test_the_run_list_shows_every_run_with_its_figures_and_badges(client, operator, runs):
    response = client.get(RUNS)
    assert listed(response) == {run.pk for run in runs.values()}
    page = response.content.decode()
    assert '<span class="loop-badge loop-warn">⚠ halted</span>' in page
    assert '<span class="loop-badge loop-quiet">■ cancelled</span>' in page
    assert '<span class="loop-badge loop-good">✓ succeeded</span>' in page
    assert '<span class="loop-badge loop-bad">⚡ tool failures</span>' in page
    assert '<span class="loop-badge loop-warn">⚠ iteration cap</span>' in page
    assert '<span class="loop-badge loop-bad">✗ failed</span>' in page
    breaker = next(r for r in response.context["cl"].result_list if r.pk == runs["breaker"].pk)
    assert breaker.failed_calls == 3


def test_the_console_badges_a_status_with_the_symbol_the_chat_shows():
    for status, symbol in RUN_SYMBOLS.items():
        assert f"{symbol} {status.replace('_', ' ')}</span>" in run_badge(status)
    for status, symbol in TOOL_SYMBOLS.items():
        assert f"{symbol} {status.replace('_', ' ')}</span>" in tool_badge(status)
    assert set(RUN_SYMBOLS) == set(RunStatus)
    assert set(TOOL_SYMBOLS) == set(ToolStatus)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status__exact=halted", {"breaker", "cap"}),
        ("status__exact=cancelled", {"cancel"}),
        ("status__exact=failed", {"failure"}),
        ("halt_reason__exact=tool_failures", {"breaker"}),
        ("halt_reason__exact=iteration_cap", {"cap"}),
        ("model=mock", {"success", "breaker", "cap", "failure", "reasoning", "cancel", "recall"}),
        ("q=5050", {"success", "recall"}),  # in the answers
        ("q=missing.txt", {"breaker"}),  # in a task
        ("q=503", {"failure"}),  # in an error
    ],
)
def test_each_run_filter_returns_the_right_runs(client, operator, runs, query, expected):
    assert listed(client.get(f"{RUNS}?{query}")) == {runs[name].pk for name in expected}


def test_runs_filter_by_user_and_by_date(client, operator, runs, alice, bob):
    assert listed(client.get(f"{RUNS}?user={bob.pk}")) == {
        runs[name].pk for name in ("cap", "failure", "reasoning")
    }
    today = timezone.now()
    on_day = f"created_at__year={today.year}&created_at__month={today.month}"
    assert len(listed(client.get(f"{RUNS}?{on_day}&created_at__day={today.day}"))) == len(runs)
    AgentRun.objects.filter(pk=runs["success"].pk).update(created_at=today - timedelta(days=400))
    assert runs["success"].pk not in listed(client.get(f"{RUNS}?created_at__year={today.year}"))


def test_the_run_page_shows_its_whole_timeline_in_order(client, operator, runs):
    run = runs["breaker"]
    page = client.get(run_page(run)).content.decode()
    kinds = list(run.events.order_by("seq").values_list("seq", "kind"))
    positions = [page.index(f'id="event-{seq}"') for seq, _ in kinds]
    assert positions == sorted(positions)
    assert {kind for _, kind in kinds} >= {
        "run_started",
        "model_replied",
        "tool_call_started",
        "tool_call_finished",
        "breaker_tripped",
        "run_halted",
        "run_finished",
    }
    trip = BreakerTrip.objects.get(run=run)
    assert reverse("admin:agent_breakertrip_change", args=[trip.pk]) in page
    for execution in run.tool_executions.all():
        assert reverse("admin:agent_toolexecution_change", args=[execution.pk]) in page
    assert "does not exist in your workspace" in page
    assert "read_file failed 3 times in a row" in page
    assert 'id="step-1"' in page


def test_the_timeline_shows_tokens_sandbox_policy_recalls_and_the_stored_memory(
    client, operator, runs
):
    page = client.get(run_page(runs["success"])).content.decode()
    replied = runs["success"].events.filter(kind="model_replied").first().data
    assert f"{replied['prompt_tokens']} prompt, {replied['completion_tokens']} completion" in page
    assert "sandbox: bubblewrap" in page
    stored = Memory.objects.get(source_run_id=runs["success"].pk)
    assert reverse("admin:memory_memory_change", args=[stored.pk]) in page
    assert "Stored in long-term memory at the end" in page

    recall = client.get(run_page(runs["recall"])).content.decode()
    assert "Memories recalled" in recall
    assert reverse("admin:memory_memory_change", args=[stored.pk]) in recall
    assert "similarity" in recall
    assert "recency" in recall


def test_the_model_reasoning_is_shown_folded_away(client, operator, runs):
    page = client.get(run_page(runs["reasoning"])).content.decode()
    assert '<details class="loop-reasoning"><summary>Reasoning</summary>' in page
    assert "The user wants a greeting." in page
    assert (
        '<details class="loop-reasoning">'
        not in client.get(run_page(runs["success"])).content.decode()
    )


def test_the_failed_and_cancelled_runs_pages_render(client, operator, runs):
    failed = client.get(run_page(runs["failure"])).content.decode()
    assert "Model failed: Groq answered 503: overloaded" in failed
    cancelled = client.get(run_page(runs["cancel"])).content.decode()
    assert "Cancelled before it started." in cancelled
    assert 'id="cancel-run"' not in cancelled  # finished: nothing to cancel


def test_an_operator_cancels_a_queued_run_from_its_page(client, operator, alice):
    run = start_run(alice, "List my files", model="mock")
    assert 'id="cancel-run"' in client.get(run_page(run)).content.decode()
    response = client.post(reverse("admin:agent_agentrun_cancel", args=[run.pk]))
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    entry = LogEntry.objects.get(object_id=str(run.pk))
    assert (entry.user, entry.change_message) == (operator, "Cancelled by an operator.")


def test_the_cancel_action_leaves_finished_runs_as_they_ended(client, operator, runs, alice):
    queued = start_run(alice, "List my files", model="mock")
    chosen = [queued.pk, runs["success"].pk]
    response = client.post(RUNS, {"action": "cancel_runs", "_selected_action": chosen}, follow=True)
    assert "Asked 1 run to stop. 1 had already finished" in response.content.decode()
    queued.refresh_from_db()
    runs["success"].refresh_from_db()
    assert (queued.status, runs["success"].status) == ("cancelled", "succeeded")


def test_a_runs_json_transcript_rebuilds_its_history(client, operator, runs):
    for run in runs.values():
        response = client.get(reverse("admin:agent_agentrun_transcript", args=[run.pk]))
        assert response["Content-Type"] == "application/json"
        assert f'filename="loop-run-{run.pk}.json"' in response["Content-Disposition"]
        transcript = json.loads(response.content)
        assert transcript["run"]["status"] == run.status
        assert [e["seq"] for e in transcript["events"]] == list(
            run.events.order_by("seq").values_list("seq", flat=True)
        )
        assert history_from_transcript(transcript) == history_of(run)


def test_a_selection_of_runs_exports_as_one_json_file_that_round_trips(client, operator, runs):
    chosen = [runs["breaker"].pk, runs["cap"].pk, runs["failure"].pk]
    response = client.post(RUNS, {"action": "export_transcripts", "_selected_action": chosen})
    exported = json.loads(response.content)
    assert [t["run"]["id"] for t in exported] == sorted(chosen)
    for transcript in exported:
        assert history_from_transcript(transcript) == history_of(
            AgentRun.objects.get(pk=transcript["run"]["id"])
        )


def test_a_transcript_carries_each_event_as_the_log_stores_it(client, operator, alice):
    """The export is a documented format: it copies the log, even a log from before a field
    existed, rather than the events as this version would write them."""
    run = start_run(alice, "List my files", model="mock")
    before_answer_source = {"status": "succeeded", "answer": "Done.", "halt_reason": ""}
    RunEvent.objects.create(run=run, seq=1, kind="run_finished", data=before_answer_source)
    stored = [{"seq": 1, "kind": "run_finished", "step": 0, "data": before_answer_source}]
    response = client.get(reverse("admin:agent_agentrun_transcript", args=[run.pk]))
    transcript = json.loads(response.content)
    assert list(transcript) == ["format", "run", "events"]
    assert transcript["format"] == "loop.transcript/1"
    exported = [{k: v for k, v in e.items() if k != "created_at"} for e in transcript["events"]]
    assert exported == stored


def test_an_event_this_version_cannot_read_is_shown_as_stored(client, operator, alice):
    run = start_run(alice, "List my files", model="mock")
    later = {"why": "a later Loop's event"}
    event = RunEvent.objects.create(run=run, seq=1, kind="run_paused", data=later)
    page = client.get(run_page(run)).content.decode()
    assert 'id="event-1"' in page
    assert '<div class="loop-unknown">' in page
    assert "a later Loop&#x27;s event" in page
    events = reverse("admin:agent_runevent_changelist")
    assert listed(client.get(f"{events}?run__id__exact={run.pk}")) == {event.pk}


def test_exporting_many_runs_costs_two_queries(runs, django_assert_num_queries):
    with django_assert_num_queries(2):
        transcripts(AgentRun.objects.all())


def test_the_tool_execution_list_links_each_call_to_its_run_and_step(client, operator, runs):
    response = client.get(EXECUTIONS)
    assert listed(response) == set(ToolExecution.objects.values_list("pk", flat=True))
    page = response.content.decode()
    for execution in ToolExecution.objects.all():
        assert f"{run_page(execution.run)}#step-{execution.step}" in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tool=read_file", {"read_file"}),
        ("status__exact=error", {"read_file"}),
        ("status__exact=ok", {"run_code", "write_file", "list_files"}),
        ("policy=bubblewrap", {"run_code"}),
        ("q=does+not+exist", {"read_file"}),  # in errors
        ("q=buy+milk", {"write_file"}),  # in arguments
        ("q=5050", {"run_code", "write_file"}),  # in results, and in what the demo wrote
    ],
)
def test_each_tool_execution_filter_returns_the_right_calls(
    client, operator, runs, query, expected
):
    response = client.get(f"{EXECUTIONS}?{query}")
    found = ToolExecution.objects.filter(pk__in=listed(response))
    assert found.exists()
    assert set(found.values_list("tool", flat=True)) == expected


def test_tool_executions_filter_by_user_and_date(client, operator, runs, bob):
    mine = listed(client.get(f"{EXECUTIONS}?user={bob.pk}"))
    assert mine == set(ToolExecution.objects.filter(run__user=bob).values_list("pk", flat=True))
    today = timezone.now()
    query = (
        f"created_at__year={today.year}&created_at__month={today.month}&created_at__day={today.day}"
    )
    assert listed(client.get(f"{EXECUTIONS}?{query}")) == set(
        ToolExecution.objects.values_list("pk", flat=True)
    )


def test_the_breaker_trip_list_filters_and_summarises_the_last_7_and_30_days(
    client, operator, runs, alice
):
    trip = BreakerTrip.objects.get()
    old = BreakerTrip.objects.create(
        run=runs["cap"], step=1, tool="run_code", reason=HaltReason.IDENTICAL_CALLS
    )
    BreakerTrip.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    response = client.get(TRIPS)
    assert listed(response) == {trip.pk, old.pk}
    summary = response.context["trip_summary"]
    assert [(c.name, c.last_7_days, c.last_30_days) for c in summary["tool"]] == [
        ("read_file", 1, 1),
        ("run_code", 0, 1),
    ]
    assert [(c.name, c.last_7_days, c.last_30_days) for c in summary["reason"]] == [
        ("identical_calls", 0, 1),
        ("tool_failures", 1, 1),
    ]
    page = response.content.decode()
    assert 'id="trip-summary"' in page
    assert f"{run_page(runs['breaker'])}#step-{trip.step}" in page
    assert listed(client.get(f"{TRIPS}?tool=read_file")) == {trip.pk}
    assert listed(client.get(f"{TRIPS}?reason__exact=identical_calls")) == {old.pk}
    assert listed(client.get(f"{TRIPS}?user={alice.pk}")) == {trip.pk}
    today = timezone.now()
    on_day = (
        f"created_at__year={today.year}&created_at__month={today.month}&created_at__day={today.day}"
    )
    assert listed(client.get(f"{TRIPS}?{on_day}")) == {trip.pk}
    trip_page = client.get(reverse("admin:agent_breakertrip_change", args=[trip.pk]))
    assert run_page(runs["breaker"]) in trip_page.content.decode()


def test_the_event_list_shows_a_runs_events_of_a_kind(client, operator, runs):
    events = reverse("admin:agent_runevent_changelist")
    breaker = runs["breaker"]
    found = listed(client.get(f"{events}?run__id__exact={breaker.pk}&kind__exact=breaker_tripped"))
    assert found == set(breaker.events.filter(kind="breaker_tripped").values_list("pk", flat=True))
    run = runs["cap"]
    assert listed(client.get(f"{events}?run__id__exact={run.pk}")) == set(
        run.events.values_list("pk", flat=True)
    )
    event = run.events.get(kind="run_halted")
    page = client.get(reverse("admin:agent_runevent_change", args=[event.pk])).content.decode()
    assert "iteration_cap" in page


def test_usage_counts_each_users_runs_outcomes_calls_failures_trips_and_tokens(
    client, operator, runs, alice, bob
):
    response = client.get(USAGE)
    assert response.status_code == 200
    rows = {row.username: row for row in response.context["rows"]}
    mine = rows["alice"]
    alice_runs = AgentRun.objects.filter(user=alice)
    assert mine.day == timezone.localdate()
    assert (mine.runs, mine.succeeded, mine.halted, mine.cancelled, mine.failed) == (4, 2, 1, 1, 0)
    assert mine.tool_calls == sum(run.tool_calls for run in alice_runs)
    assert mine.tool_failures == 4  # the breaker's three, and the demo's look for its file
    assert mine.breaker_trips == 1
    assert mine.tokens == sum(run.total_tokens for run in alice_runs)
    theirs = rows["bob"]
    assert (theirs.runs, theirs.succeeded, theirs.halted, theirs.failed) == (3, 1, 1, 1)
    assert (theirs.tool_failures, theirs.breaker_trips) == (0, 0)
    page = response.content.decode()
    assert f"{RUNS}?user={alice.pk}&amp;created_at__year=" in page
    assert response.context["totals"]["runs"] == len(runs)


def test_usage_keeps_to_its_date_range_and_user(client, operator, runs, alice):
    AgentRun.objects.filter(pk=runs["success"].pk).update(
        created_at=timezone.now() - timedelta(days=10)
    )
    default = {row.username: row.runs for row in client.get(USAGE).context["rows"]}
    assert default["alice"] == 3  # the default range is the last 7 days
    since = (timezone.localdate() - timedelta(days=45)).isoformat()
    rows = client.get(f"{USAGE}?since={since}&user={alice.pk}").context["rows"]
    assert {row.username for row in rows} == {"alice"}
    assert sum(row.runs for row in rows) == 4
    assert len(rows) == 2  # two days
    bad = client.get(f"{USAGE}?since=2026-02-01&until=2026-01-01")
    assert "The range starts after it ends." in bad.content.decode()


def test_usage_per_day_is_three_queries_whatever_the_range(runs, django_assert_num_queries):
    today = timezone.localdate()
    with django_assert_num_queries(3):
        usage(today - timedelta(days=365), today)


def test_the_admin_index_links_the_console_and_the_sign_ups_waiting(client, operator):
    User.objects.create_user("newcomer", is_active=False)
    deactivated = User.objects.create_user("former", is_active=False)
    User.objects.filter(pk=deactivated.pk).update(last_login=timezone.now())
    page = client.get(reverse("admin:index")).content.decode()
    assert USAGE in page
    assert RUNS in page
    assert TRIPS in page
    assert reverse("admin:accounts_signup_changelist") in page
    assert "1 waiting" in page


def test_an_operator_approves_sign_ups_waiting_for_approval(client, operator):
    newcomer = User.objects.create_user("newcomer", is_active=False)
    users = reverse("admin:auth_user_changelist")
    assert listed(client.get(f"{users}?approval=waiting")) == {newcomer.pk}
    response = client.post(
        users, {"action": "approve", "_selected_action": [newcomer.pk, operator.pk]}, follow=True
    )
    assert "Approved 1 sign-up." in response.content.decode()
    newcomer.refresh_from_db()
    assert newcomer.is_active
    assert LogEntry.objects.filter(
        object_id=str(newcomer.pk), change_message="Approved the sign-up."
    ).exists()


def test_a_users_page_links_to_their_runs_memories_and_usage(client, operator, runs, alice):
    page = client.get(reverse("admin:auth_user_change", args=[alice.pk])).content.decode()
    assert f"{RUNS}?user={alice.pk}" in page
    assert f"{MEMORIES}?user={alice.pk}" in page
    assert f"{USAGE}?user={alice.pk}" in page
    assert f"{EXECUTIONS}?user={alice.pk}" in page
    assert listed(client.get(f"{MEMORIES}?user={alice.pk}")) == set(
        Memory.objects.filter(owner=alice).values_list("pk", flat=True)
    )


def test_the_run_list_offers_the_years_from_its_first_run_to_its_last(client, operator, runs):
    first = min(run.pk for run in runs.values())
    last_year = timezone.now().year - 1
    AgentRun.objects.filter(pk=first).update(created_at=timezone.now().replace(year=last_year))
    page = client.get(RUNS).content.decode()
    assert f"?created_at__year={last_year}" in page
    assert f"?created_at__year={last_year + 1}" in page
    assert listed(client.get(f"{RUNS}?created_at__year={last_year}")) == {first}


def test_an_unfiltered_list_of_a_huge_table_shows_the_estimated_total(
    client, operator, runs, monkeypatch
):
    from django.db import connection

    from console.widgets import EstimatedCountPaginator

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agent_runevent")
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'agent_runevent'")
        estimate = cursor.fetchone()[0]
    monkeypatch.setattr(EstimatedCountPaginator, "EXACT_BELOW", 1)
    events = reverse("admin:agent_runevent_changelist")
    assert client.get(events).context["cl"].result_count == estimate
    run = runs["breaker"]
    filtered = client.get(f"{events}?run__id__exact={run.pk}").context["cl"]
    assert filtered.result_count == run.events.count()  # filtered: counted exactly


def test_usage_shows_a_page_of_rows_at_a_time_with_totals_for_all(
    client, operator, runs, monkeypatch
):
    from console import runs as run_pages

    monkeypatch.setattr(run_pages, "USAGE_ROWS_PER_PAGE", 1)
    first = client.get(USAGE)
    assert len(first.context["rows"]) == 1
    assert first.context["totals"]["runs"] == len(runs)
    assert 'id="usage-pages"' in first.content.decode()
    second = client.get(f"{USAGE}?p=2")
    assert second.context["rows"][0].username != first.context["rows"][0].username
