"""No list page of the console costs more queries when it shows more rows."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, call
from agent.models import AgentRun
from agent.runs import cancel_run, start_run
from core.llm import LLMError
from engine.execution import execute_run
from memory.forgetting import forget
from memory.models import Memory

pytestmark = pytest.mark.django_db

LIST_PAGES = [
    "admin:index",
    "admin:agent_agentrun_changelist",
    "admin:agent_runevent_changelist",
    "admin:agent_breakertrip_changelist",
    "admin:agent_toolexecution_changelist",
    "admin:memory_memory_changelist",
    "admin:memory_forgottenmemory_changelist",
    "admin:auth_user_changelist",
    "admin:agent_agentrun_usage",
]


def make_runs(user) -> None:
    """One run of each ending for `user`, each leaving its records."""
    execute_run(start_run(user, "Keep reading missing.txt until it exists", model="mock"))
    execute_run(start_run(user, "Save 'buy milk' to notes.txt", model="mock"))
    execute_run(
        start_run(user, "List my files", model="mock"),
        llm=ScriptedLLM([call("list_files", {}), LLMError("Groq answered 503")]),
    )
    cancel_run(user, start_run(user, "List my files", model="mock").pk)
    forget(Memory.objects.filter(owner=user)[:1], User.objects.get(username="root"))


def queries(client, url: str) -> int:
    client.get(url)  # warm: content types and the like are cached after the first request
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


@pytest.mark.parametrize("page", LIST_PAGES)
def test_a_list_page_costs_the_same_queries_for_more_rows(client, operator, workspaces, page):
    url = reverse(page)
    first = User.objects.create_user("first")
    make_runs(first)
    few = queries(client, url)
    for n in range(3):
        make_runs(User.objects.create_user(f"more{n}"))
    assert AgentRun.objects.count() == 16
    assert queries(client, url) == few


def test_a_runs_page_costs_the_same_queries_for_a_longer_timeline(client, operator, alice):
    short = execute_run(start_run(alice, "a", model="mock"), llm=ScriptedLLM([call("list_files")]))
    long = execute_run(
        start_run(alice, "b", model="mock"), llm=ScriptedLLM([call("list_files")] * 6)
    )
    assert long.events.count() > short.events.count()
    page = "admin:agent_agentrun_change"
    assert queries(client, reverse(page, args=[long.pk])) == queries(
        client, reverse(page, args=[short.pk])
    )
