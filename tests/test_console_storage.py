"""The console's storage page (console/storage.py): the store's size per table, for operators
only, linked from the console's index."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from agent.runs import start_run
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

STORAGE = reverse("admin:agent_agentrun_storage")


def test_an_operator_sees_each_tables_size_and_rows_linked_from_the_index(
    client, operator, alice, workspaces, settings
):
    settings.LOOP_KEEP_EVENTS_DAYS = 90
    run = execute_run(start_run(alice, "What is 17 * 23?", model="mock"))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agent_runevent")
    assert STORAGE in client.get(reverse("admin:index")).text

    response = client.get(STORAGE)

    assert response.status_code == 200
    sizes = {size.table: size for size in response.context["sizes"]}
    assert {"agent_agentrun", "agent_runevent", "tools_toolexecution", "procrastinate_jobs"} <= set(
        sizes
    )
    events = sizes["agent_runevent"]
    assert events.rows == run.events.count()  # the estimate, fresh from ANALYZE
    assert events.total >= events.data + events.indexes > 0
    assert events.url == reverse("admin:agent_runevent_changelist")
    totals = [size.total for size in response.context["sizes"]]
    assert totals == sorted(totals, reverse=True)  # largest first
    page = response.text
    assert "<code>agent_runevent</code>" in page
    assert "agent.RunEvent" in page
    assert "over <strong>90</strong> days ago are pruned" in page
    assert "LOOP_KEEP_JOBS_DAYS 0" in page
    assert response.context["database_size"] >= sum(totals)


def test_staff_without_the_runs_permission_are_refused(alice):
    staff = User.objects.create_user("clerk", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(STORAGE).status_code == 403


def test_a_person_who_is_not_staff_is_sent_to_log_in(as_alice):
    response = as_alice.get(STORAGE)
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]
    assert "<code>" not in response.text
