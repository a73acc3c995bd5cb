"""The console's run search (console/runs.py): words and word starts in a run's task, answer or
error, through PostgreSQL's full-text index on them (agent_run_search_idx, migration
agent.0012), on the embedded server, which has no pg_trgm."""

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agent.models import AgentRun
from console.runs import prefix_query

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:agent_agentrun_changelist")
INDEX = "agent_run_search_idx"
# Everything that means something to SQL or to a tsquery, alone and inside words.
SPECIAL = ["'", "&", "|", "!", ":", "(", ")", "*", "\\", "<->", "\\'", "';--", ":*", "%", "_"]


def found(client: Client, term: str) -> list[int]:
    response = client.get(RUNS, {"q": term})
    assert response.status_code == 200, (term, response.status_code)
    return [run.pk for run in response.context["cl"].result_list]


@pytest.fixture
def runs(alice, bob) -> dict[str, AgentRun]:
    def run(user: User, task: str, answer: str = "", error: str = "") -> AgentRun:
        return AgentRun.objects.create(
            user=user, task=task, answer=answer, error=error, provider="mock", model="mock"
        )

    return {
        "shopping": run(alice, "Read notes.txt and tell me what to buy", "Buy oat milk."),
        "weather": run(bob, "What is the weather in Lyon?", "Sunny, 21 degrees."),
        "outage": run(alice, "Summarise the report", error="Model failed: Groq answered 503"),
        "irish": run(bob, "Write to O'Brien about the foo-bar release", "Done & sent!"),
    }


def test_a_word_of_the_task_the_answer_or_the_error_finds_its_run_and_no_other(
    client, operator, runs, path
):
    assert found(client, "Lyon") == [runs["weather"].pk]  # the task
    assert found(client, "oat") == [runs["shopping"].pk]  # the answer
    assert found(client, "503") == [runs["outage"].pk]  # the error
    assert found(client, "GROQ answered") == [runs["outage"].pk]  # every word, any case
    assert found(client, "groq sunny") == []  # words of two runs: no run has both
    assert found(client, "zebra") == []


def test_a_word_start_finds_the_runs_with_a_word_that_starts_so(client, operator, runs, path):
    assert found(client, "summar") == [runs["outage"].pk]
    assert found(client, "degr") == [runs["weather"].pk]
    assert found(client, "notes.t") == [runs["shopping"].pk]  # notes.txt is one word
    assert found(client, "notes") == [runs["shopping"].pk]
    assert found(client, "foo-b") == [runs["irish"].pk]
    assert found(client, "bar") == [runs["irish"].pk]  # a part of a hyphenated word
    assert found(client, "o'brien") == [runs["irish"].pk]
    assert found(client, '"oat milk"') == [runs["shopping"].pk]  # a phrase, in order
    assert found(client, '"milk oat"') == []
    # Words, not any substring: the middle of a word is not searched.
    assert found(client, "ather") == []


@pytest.fixture(params=["by id", "by words"])
def path(request, monkeypatch) -> str:
    """Both ways the search lists its matches: few by id, many through the words' filter."""
    if request.param == "by words":
        monkeypatch.setattr("console.runs.SEARCH_IDS_UP_TO", 0)
    return request.param


def test_the_list_keeps_its_order_and_pages(client, operator, alice, path):
    made = [
        AgentRun.objects.create(user=alice, task=f"Task {n}: count", provider="mock", model="m")
        for n in range(60)
    ]
    first = client.get(RUNS, {"q": "count"}).context["cl"]
    assert first.result_count == 60
    assert [run.pk for run in first.result_list] == [run.pk for run in reversed(made)][:50]
    second = client.get(RUNS, {"q": "count", "p": 2}).context["cl"]
    assert [run.pk for run in second.result_list] == [run.pk for run in reversed(made)][50:]
    assert found(client, "task 7") == [made[7].pk]  # "7" as a word start: 7 only, of 0..59


def test_the_search_combines_with_the_filters(client, operator, runs, alice, path):
    response = client.get(RUNS, {"q": "t", "user": alice.pk})
    assert sorted(run.pk for run in response.context["cl"].result_list) == sorted(
        [runs["shopping"].pk, runs["outage"].pk]
    )


@pytest.mark.parametrize("special", SPECIAL)
def test_sql_and_tsquery_characters_neither_fail_nor_inject(client, operator, runs, special, path):
    assert found(client, special) == []  # punctuation alone is no word
    assert found(client, f"milk {special}") == [runs["shopping"].pk]
    assert found(client, f"Lyon{special}") == [runs["weather"].pk]
    assert found(client, f"{special}Lyon") == [runs["weather"].pk]
    assert found(client, f"zebra{special}milk") == []
    assert AgentRun.objects.count() == len(runs)


def test_odd_input_neither_fails_nor_injects(client, operator, runs, path):
    assert len(found(client, "")) == len(runs)  # no search: the whole list
    assert len(found(client, "   ")) == len(runs)
    assert found(client, '"') == []
    assert len(found(client, '""')) == len(runs)  # an empty phrase: no search, as Django's
    found(client, "x\x00y")  # Django's list drops a search with a NUL; the words never have one
    assert prefix_query("x\x00y") == "'x':* & 'y':*"
    assert found(client, "a" * 5000) == []  # longer than a word PostgreSQL indexes
    assert found(client, "milk " * 300) == [runs["shopping"].pk]
    assert found(client, "milk:* | lyon") == []  # operators are searched as text, not obeyed
    assert found(client, "!milk") == [runs["shopping"].pk]
    assert found(client, "x'); DROP TABLE agent_agentrun; --") == []
    assert found(client, "milk') OR ('1'='1") == []
    assert AgentRun.objects.count() == len(runs)


def test_staff_need_the_runs_permission_to_search(client, runs):
    clerk = User.objects.create_user("clerk", is_staff=True)
    client.force_login(clerk)
    assert client.get(RUNS, {"q": "milk"}).status_code == 403
    clerk.user_permissions.add(Permission.objects.get(codename="view_agentrun"))
    client.force_login(User.objects.get(pk=clerk.pk))
    assert found(client, "milk") == [runs["shopping"].pk]


def test_a_person_who_is_not_staff_is_sent_to_log_in(as_alice, runs):
    response = as_alice.get(RUNS, {"q": "milk"})
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


@pytest.mark.parametrize("term", ["item1234", "notes"])
def test_the_search_uses_the_full_text_index(client, operator, alice, term, path):
    AgentRun.objects.bulk_create(
        AgentRun(
            user=alice,
            task=f"Task {n}: read notes.txt",
            answer=f"Buy item{n}.",
            provider="mock",
            model="mock",
        )
        for n in range(3000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agent_agentrun")
    with CaptureQueriesContext(connection) as queries:
        listed = found(client, term)
    assert len(listed) == (1 if term == "item1234" else 50)
    # What finds the matches: counting them, listing their ids. (A page of many matches, and the
    # date bar's ends, may be read along the id or date order instead, and meet them soon.)
    searches = [
        query["sql"]
        for query in queries
        if "to_tsvector" in query["sql"]
        and not any(part in query["sql"] for part in (" LIMIT ", "MIN("))
    ]
    assert len(searches) >= (2 if path == "by id" else 1)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in searches:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert INDEX in plan, plan
