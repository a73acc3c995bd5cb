"""Malformed filters and ranges on the console's pages: each is ignored with a message or refused
with a 400 that says why, never a 500."""

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from accounts.models import SignUp
from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from agent.runs import start_run
from console.widgets import IGNORED_FILTERS
from engine.execution import execute_run
from memory.models import ForgottenMemory, Memory

pytestmark = pytest.mark.django_db

USER_FILTERED = (AgentRun, ToolExecution, BreakerTrip, Memory)
UNFILTERED = (RunEvent, ForgottenMemory, User, SignUp, Group)
USAGE = reverse("admin:agent_agentrun_usage")
# What an attacker (or a mangled link) puts where an id, a year or a date belongs.
MALFORMED_IDS = ("abc", "1.5", "-1", "²", "99999999999999999999", "1 OR 1=1")


def changelist(model) -> str:
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")


@pytest.fixture(scope="module")
def run(module_records) -> AgentRun:
    """A run that tripped the breaker, so every list has rows: made once for the module (a real
    run, sandbox and all) and committed, then deleted with its user. The tests only read."""

    def build() -> AgentRun:
        alice = User.objects.create_user("alice")
        return execute_run(
            start_run(alice, "Keep reading missing.txt until it exists", model="mock")
        )

    return module_records.make(build)


def warnings(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.mark.parametrize("model", USER_FILTERED, ids=lambda model: model._meta.model_name)
def test_a_malformed_user_filter_is_ignored_with_a_message(client, operator, run, model):
    for value in MALFORMED_IDS:
        response = client.get(changelist(model), {"user": value})
        assert response.status_code == 200
        assert warnings(response) == [f"Ignored the user filter: {value!r} is not a user id."]
        assert response.context["cl"].result_count == model.objects.count()


@pytest.mark.parametrize("model", UNFILTERED, ids=lambda model: model._meta.model_name)
def test_a_filter_a_list_does_not_have_shows_the_whole_list_and_says_so(
    client, operator, run, model
):
    response = client.get(changelist(model), {"user": "abc"}, follow=True)
    assert response.status_code == 200
    assert warnings(response) == [IGNORED_FILTERS]
    whole = client.get(changelist(model)).context["cl"]
    assert response.context["cl"].result_count == whole.result_count


@pytest.mark.parametrize("model", USER_FILTERED, ids=lambda model: model._meta.model_name)
def test_a_user_filter_for_nobody_lists_nothing(client, operator, run, model):
    response = client.get(changelist(model), {"user": "987654"})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


@pytest.mark.parametrize(
    ("model", "query"),
    [
        (RunEvent, {"run__id__exact": "abc"}),
        (ToolExecution, {"run__id__exact": "99999999999999999999"}),
        (AgentRun, {"created_at__year": "abc"}),
        (AgentRun, {"created_at__year": "99999"}),
        (AgentRun, {"created_at__year": "2026", "created_at__month": "13"}),
        (BreakerTrip, {"created_at__year": "0"}),
        (Memory, {"source_run_id": "x"}),
        (AgentRun, {"status": "no-such-status", "p": "abc"}),
    ],
)
def test_other_malformed_filters_never_give_a_500(client, operator, run, model, query):
    response = client.get(changelist(model), query, follow=True)
    assert response.status_code == 200
    said = warnings(response)
    assert said == [IGNORED_FILTERS] or response.context["cl"].result_count == 0


def test_the_whole_calendar_as_a_usage_range_is_cut_to_the_days_of_the_runs(client, operator, run):
    response = client.get(USAGE, {"since": "0001-01-01", "until": "9999-12-31"})
    assert response.status_code == 200
    today = timezone.localdate()
    assert (response.context["since"], response.context["until"]) == (today, today)
    assert sum(row.runs for row in response.context["rows"]) == 1
    assert warnings(response) == [
        f"Runs were made from {today:%Y-%m-%d} to today, so the range shown is "
        f"{today:%Y-%m-%d} to {today:%Y-%m-%d}."
    ]


def test_a_usage_range_before_every_run_shows_none(client, operator, run):
    response = client.get(USAGE, {"since": "0001-01-01", "until": "0001-01-31"})
    assert response.status_code == 200
    assert response.context["rows"] == []
    assert "none in the range asked for" in warnings(response)[0]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"since": "2026-02-01", "until": "2026-01-01"}, "The range starts after it ends."),
        ({"since": "2026-13-45"}, "Enter a valid date."),
        ({"until": "10000-01-01"}, "Enter a valid date."),
        ({"since": "\x00"}, "Enter a valid date."),
        ({"user": "abc"}, "Select a valid choice."),
        ({"user": "99999999999999999999"}, "Select a valid choice."),
        ({"p": "abc", "user": "-1"}, "Select a valid choice."),
    ],
)
def test_a_malformed_usage_range_is_a_400_that_says_why(client, operator, run, query, error):
    response = client.get(USAGE, query)
    assert response.status_code == 400
    assert error in response.content.decode()
    assert sum(row.runs for row in response.context["rows"]) == 1  # the last week meanwhile
