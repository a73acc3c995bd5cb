"""The console's assistants: staff make and edit site assistants (each save a new version by
them), people's own are read-only, versions are history, archive replaces delete, and the run
list is filtered by assistant from each one's runs link."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from agent.models import Conversation
from agent.runs import start_run
from assistants.models import Assistant
from tests.test_assistants import made

pytestmark = pytest.mark.django_db

LIST = reverse("admin:assistants_assistant_changelist")
ADD = reverse("admin:assistants_assistant_add")
RUNS = reverse("admin:agent_agentrun_changelist")


def site_form(**fields):
    posted = {
        "name": "Support",
        "description": "",
        "instructions": "Be kind.",
        "model": "",
        "all_tools": "on",
        "all_mcp_servers": "on",
        "use_memory": "on",
        "versions-TOTAL_FORMS": "0",
        "versions-INITIAL_FORMS": "0",
    }
    return posted | fields


def test_staff_make_and_edit_a_site_assistant_each_save_a_version(client, operator):
    group = Group.objects.create(name="support")
    response = client.post(ADD, site_form(groups=[group.pk]))
    assert response.status_code == 302, response.content.decode()[:3000]
    assistant = Assistant.objects.get()
    assert assistant.owner is None
    assert list(assistant.groups.all()) == [group]
    change = reverse("admin:assistants_assistant_change", args=[assistant.pk])
    versions = assistant.versions.count()
    posted = site_form(instructions="Be brief.", everyone="on")
    posted |= {"versions-TOTAL_FORMS": str(versions), "versions-INITIAL_FORMS": str(versions)}
    for index, version in enumerate(assistant.versions.order_by("-number")):
        posted[f"versions-{index}-id"] = str(version.pk)
        posted[f"versions-{index}-assistant"] = str(assistant.pk)
    assert client.post(change, posted).status_code == 302
    first, second = assistant.versions.order_by("number")
    assert (first.snapshot["instructions"], second.snapshot["instructions"]) == (
        "Be kind.",
        "Be brief.",
    )
    assert second.created_by == operator
    page = client.get(change).content.decode()
    assert "Be kind." in page  # the history, read-only


def test_a_persons_assistant_is_read_only_and_none_is_deleted(client, operator, alice):
    mine = made(alice, name="Alice's own")
    change = reverse("admin:assistants_assistant_change", args=[mine.pk])
    page = client.get(change)
    assert page.status_code == 200
    assert 'name="name"' not in page.content.decode()  # shown, not editable
    assert client.post(change, site_form(name="Taken over")).status_code == 403
    delete = reverse("admin:assistants_assistant_delete", args=[mine.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    archived = client.post(LIST, {"action": "archive", "_selected_action": [mine.pk]})
    assert archived.status_code == 302
    mine.refresh_from_db()
    assert (mine.name, mine.archived_at is not None) == ("Alice's own", True)


def test_the_runs_list_is_filtered_by_assistant(client, operator, alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 50
    helper, other = (
        made(None, name="Helper", everyone=True),
        made(None, name="Other", everyone=True),
    )
    start_run(
        alice,
        "a run with helper",
        model="mock",
        conversation=Conversation.objects.create(owner=alice, assistant=helper),
    )
    start_run(
        alice,
        "a run with other",
        model="mock",
        conversation=Conversation.objects.create(owner=alice, assistant=other),
    )
    start_run(alice, "a run on its own", model="mock")
    listing = client.get(LIST).content.decode()
    assert f'href="{RUNS}?assistant={helper.pk}"' in listing
    assert "1 run<" in listing
    page = client.get(RUNS, {"assistant": helper.pk}).content.decode()
    assert "a run with helper" in page
    assert "a run with other" not in page
    assert "a run on its own" not in page
    everything = client.get(RUNS).content.decode()
    tasks = ("a run with helper", "a run with other", "a run on its own")
    assert all(task in everything for task in tasks)
