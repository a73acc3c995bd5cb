"""rights_of with real groups: the union of a person's groups' rights, MCP servers by group, the
ask rule across groups, a person in no group with rights (LOOP_UNGROUPED_RIGHTS all or none),
one query, and once a request (never kept across requests)."""

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rights.effective import EVERYTHING, NOTHING, read_once, rights_of
from rights.models import GroupRights
from tests.rights_helpers import group_with, site_server

pytestmark = pytest.mark.django_db


def test_a_person_in_no_group_with_rights_gets_the_ungrouped_setting(alice, settings):
    Group.objects.create(name="no rights row").user_set.add(alice)  # decides nothing
    settings.LOOP_UNGROUPED_RIGHTS = "all"
    assert rights_of(alice) == EVERYTHING
    settings.LOOP_UNGROUPED_RIGHTS = "none"
    assert rights_of(alice) == NOTHING
    assert not rights_of(alice).allows_model("mock")


def test_the_union_of_several_groups(alice, bob):
    calendar = site_server("cal", "add_event", alice)
    files = site_server("files", "find", alice)
    group_with(
        "writers",
        alice,
        bob,
        all_models=False,
        model_names=["mock"],
        all_tools=False,
        tool_names=["read_file"],
        all_mcp_servers=False,
        servers=[calendar],
    )
    group_with(
        "coders",
        alice,
        all_models=False,
        model_names=["groq:x"],
        all_tools=False,
        tool_names=["run_code"],
        all_mcp_servers=False,
        servers=[files],
    )
    rights = rights_of(alice)
    assert rights.models == {"mock", "groq:x"}
    assert rights.tools == {"read_file", "run_code"}
    assert rights.mcp_servers == {calendar.pk, files.pk}
    assert rights_of(bob).tools == {"read_file"}
    assert rights_of(bob).mcp_servers == {calendar.pk}
    group_with("everything", bob)  # every "all" on
    assert rights_of(bob) == EVERYTHING


def test_a_tool_asks_when_every_group_giving_it_asks(alice, bob):
    group_with("careful", alice, bob, ask_before=["run_code", "cal__add_event"])
    group_with("relaxed", alice)
    group_with("no code", bob, all_tools=False, tool_names=["read_file"], all_mcp_servers=False)
    assert rights_of(alice).ask == frozenset()  # the less strict group wins
    # Bob's other group gives neither run_code nor any server: it has no say.
    assert rights_of(bob).ask == {"run_code", "cal__add_event"}


def test_rights_are_one_query_and_read_once_a_request(alice, django_assert_num_queries):
    group_with("writers", alice, all_tools=False, tool_names=["read_file"])
    with django_assert_num_queries(1):
        rights_of(alice)
    with read_once(), CaptureQueriesContext(connection) as read:
        first = rights_of(alice)
        assert rights_of(alice) is first
        assert len(read) == 1
        # A change within the request is read again, not the answer kept.
        GroupRights.objects.filter(group__name="writers").update(tool_names=["run_code"])
        row = GroupRights.objects.get(group__name="writers")
        row.save()
        assert rights_of(alice).tools == {"run_code"}
    with CaptureQueriesContext(connection) as later:  # outside a request: nothing kept
        rights_of(alice)
    assert len(later) == 1


def test_a_request_reads_them_once_and_the_next_request_afresh(as_alice, alice):
    group_with("writers", alice, all_models=False, model_names=["mock"])
    with CaptureQueriesContext(connection) as page:
        assert as_alice.get("/").status_code == 200
    asked = [
        query["sql"] for query in page.captured_queries if "rights_grouprights" in query["sql"]
    ]
    assert len(asked) == 1
    GroupRights.objects.filter(group__name="writers").update(model_names=[])
    assert "Your groups give you no model" in as_alice.get("/").content.decode()
