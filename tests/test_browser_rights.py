"""Group rights in Chromium on the real site (daphne, a worker): an operator gives a group its
rights on the group's page, which axe finds no violation on, nor on the person's and the run's
pages that show them; then a member's chat run on the mock, whose model calls run_code, reads
that their groups do not allow it, and the snippet never runs."""

import re

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import expect

from agent.models import AgentRun
from rights.models import GroupRights
from tests.test_browser import (
    CHROMIUM_ARGS,  # noqa: F401 (the launch flags the browser fixture uses)
    PASSWORD,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
)
from tests.test_browser_access import LAPTOP, axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "Your groups do not allow the tool run_code"


def test_an_operator_sets_a_groups_rights_and_a_member_cannot_run_code(
    live_site,  # noqa: F811
    browser,  # noqa: F811
):
    db(lambda: User.objects.create_superuser("root", "root@example.com", PASSWORD))
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    operator = log_in(browser, live_site, "root", LAPTOP)
    operator.goto(f"{live_site}/admin/auth/group/add/")
    found = {"add": axe_violations(operator)}
    operator.fill("input[name=name]", "readers")
    rights_form = operator.locator("#rights-0")  # not the inline's empty template
    rights_form.get_by_label("This group decides what its people may use").check()
    rights_form.get_by_label("Every built-in tool").uncheck()
    tools = rights_form.locator(".field-tool_names")
    tools.get_by_label("read_file", exact=True).check()
    tools.get_by_label("list_files", exact=True).check()
    operator.get_by_role("button", name="Save and continue editing").click()
    expect(operator.locator(".messagelist")).to_contain_text("was added successfully")
    found["change"] = axe_violations(operator)
    group = db(lambda: Group.objects.get(name="readers"))
    rights = db(lambda: GroupRights.objects.get(group=group))
    assert (rights.all_tools, sorted(rights.tool_names)) == (False, ["list_files", "read_file"])
    db(lambda: group.user_set.add(alice))

    person = log_in(browser, live_site, "alice", LAPTOP)
    person.click("button[name=task][value='What is 17 * 23?']")
    expect(last_turn(person)).to_contain_text(REFUSED, timeout=WAIT_MS)
    run = db(lambda: AgentRun.objects.get())
    assert run.allowed["rights"]["tools"] == ["list_files", "read_file"]
    expect(last_turn(person).locator(".card.answer")).to_be_visible(timeout=WAIT_MS)
    assert "391" not in db(lambda: AgentRun.objects.get().answer)

    operator.goto(f"{live_site}/admin/auth/user/{alice.pk}/change/")
    expect(operator.get_by_text("Group readers")).to_be_visible()
    found["person"] = axe_violations(operator)
    operator.goto(f"{live_site}/admin/agent/agentrun/{run.pk}/change/")
    expect(operator.get_by_text("What it was allowed")).to_be_visible()
    found["run"] = axe_violations(operator)
    assert not any(found.values()), found
    assert re.search(r"list_files, read_file", operator.content())
