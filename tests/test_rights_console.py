"""The console: an operator sets a group's rights on its page (models, built-in tools, MCP
servers, "ask before"), checked with clear messages and recorded in the group's history; the
page lists the group's quotas with a link to add one; a person's page says what their groups
give them; a run's page says what it was allowed."""

import html
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.urls import reverse

from accounting.models import Quota
from agent.runs import new_conversation, submit_run
from rights.effective import rights_of
from rights.models import GroupRights
from tests.rights_helpers import GROQ_MODEL, group_with, offering_two_models, site_server

pytestmark = pytest.mark.django_db


def management(initial: int) -> dict[str, str]:
    return {
        "rights-TOTAL_FORMS": "1",
        "rights-INITIAL_FORMS": str(initial),
        "rights-MIN_NUM_FORMS": "0",
        "rights-MAX_NUM_FORMS": "1",
    }


def said(response) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def two_models(settings):
    offering_two_models(settings)


def test_an_operator_gives_a_group_rights_and_its_history_says_so(
    client, operator, alice, two_models
):
    server = site_server("cal", "add_event")
    page = said(client.get(reverse("admin:auth_group_add")))
    for offered in ("mock", GROQ_MODEL, "run_code", "remember", "Cal", "cal__add_event"):
        assert offered in page
    response = client.post(
        reverse("admin:auth_group_add"),
        {
            "name": "coders",
            **management(0),
            "rights-0-decides": "on",
            "rights-0-model_names": ["mock"],
            "rights-0-tool_names": ["read_file", "run_code"],
            "rights-0-mcp_servers": [str(server.pk)],
            "rights-0-ask_before": ["run_code", "cal__add_event"],
        },
    )
    assert response.status_code == 302, said(response)
    group = Group.objects.get(name="coders")
    rights = GroupRights.objects.get(group=group)
    assert (rights.all_models, rights.model_names) == (False, ["mock"])
    assert (rights.all_tools, rights.tool_names) == (False, ["read_file", "run_code"])
    assert (rights.all_mcp_servers, list(rights.mcp_servers.all())) == (False, [server])
    assert rights.ask_before == ["run_code", "cal__add_event"]
    group.user_set.add(alice)
    assert rights_of(alice).models == {"mock"}

    url = reverse("admin:auth_group_change", args=[group.pk])
    changed = client.post(
        url,
        {
            "name": "coders",
            **management(1),
            "rights-0-group": str(group.pk),
            "rights-0-all_models": "on",
            "rights-0-tool_names": ["read_file"],
            "rights-0-mcp_servers": [str(server.pk)],
        },
    )
    assert changed.status_code == 302, said(changed)
    assert rights_of(alice).models is None
    assert rights_of(alice).tools == {"read_file"}
    entry = LogEntry.objects.filter(object_id=str(group.pk)).order_by("pk").last()
    assert entry is not None
    assert entry.user == operator
    assert "for group rights “Rights of coders”" in entry.get_change_message()


def test_saving_a_group_without_ticking_decides_makes_no_rights(client, operator):
    response = client.post(reverse("admin:auth_group_add"), {"name": "plain", **management(0)})
    assert response.status_code == 302
    assert not GroupRights.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"rights-0-tool_names": ["read_file"], "rights-0-ask_before": ["run_code"]},
            "This group does not give run_code, so asking about it would change nothing",
        ),
        (
            {"rights-0-all_models": "on", "rights-0-model_names": ["mock"]},
            "“Every model” is ticked, so the ones ticked here would say nothing",
        ),
        (
            {"rights-0-all_tools": "on", "rights-0-model_names": ["no-such-model"]},
            "Select a valid choice. no-such-model is not one of the available choices.",
        ),
    ],
)
def test_rights_that_say_nothing_are_refused_with_why(
    client, operator, two_models, fields, message
):
    response = client.post(
        reverse("admin:auth_group_add"),
        {"name": "coders", **management(0), "rights-0-decides": "on", **fields},
    )
    assert response.status_code == 200
    assert message in said(response)
    assert not Group.objects.exists()


def test_a_stored_model_no_longer_offered_stays_visible(client, operator, two_models):
    group = group_with("old", all_models=False, model_names=["groq:retired-model"])
    page = said(client.get(reverse("admin:auth_group_change", args=[group.pk])))
    assert "groq:retired-model (no longer offered)" in page
    assert re.search(r'value="groq:retired-model"[^>]*checked', page)


def test_the_group_page_lists_its_quotas_with_a_link_to_add_one(client, operator):
    group = group_with("coders")
    url = reverse("admin:auth_group_change", args=[group.pk])
    add = reverse("admin:accounting_quota_add") + f"?group={group.pk}"
    assert add in client.get(url).content.decode()
    quota = Quota.objects.create(group=group, measure="runs", limit=5, period="day")
    page = client.get(url).content.decode()
    assert reverse("admin:accounting_quota_change", args=[quota.pk]) in page
    assert client.get(add).status_code == 200


def test_a_persons_page_says_which_group_gives_what(client, operator, alice):
    group_with("writers", alice, all_tools=False, tool_names=["read_file"])
    group_with("coders", alice, all_tools=False, tool_names=["run_code"], ask_before=["run_code"])
    page = said(client.get(reverse("admin:auth_user_change", args=[alice.pk])))
    assert "Group coders" in page
    assert "Group writers" in page
    together = page[page.index("Together: what they may use") :]
    assert "<dd>read_file, run_code</dd>" in together
    assert "<dd>every model the site offers</dd>" in together
    assert "<dd>run_code</dd>" in together  # asked: every group giving run_code asks


def test_a_runs_page_says_what_it_was_allowed(client, operator, alice):
    server = site_server("cal", "add_event", alice)
    group_with(
        "coders",
        alice,
        all_models=False,
        model_names=["mock"],
        all_mcp_servers=False,
        servers=[server],
        ask_before=["run_code"],
    )
    run = submit_run(alice, "What is 2 + 2?", new_conversation(alice), model="mock")
    GroupRights.objects.filter(group__name="coders").update(model_names=["groq:other"])
    page = said(client.get(reverse("admin:agent_agentrun_change", args=[run.pk])))
    shown = page[page.index("What it was allowed") :]
    for line in (
        "<dd>mock</dd>",
        "<dd>every built-in tool</dd>",
        "<dd>Cal</dd>",
        "<dd>run_code</dd>",
    ):
        assert line in shown
