"""The approval pages of the operators' console (console/approvals.py): staff set a tool's mode
over LOOP_APPROVAL, which is shown read-only beside it; the audit of calls that asked lists,
filters and searches them, read-only, and its two actions decide waiting calls through the same
functions as a person (deny with agent.change_agentrun, approve only with
approvals.decide_for_others); the grants are listed read-only. Every page's queries are as many for
many rows as for a few."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from approvals.decisions import decide, decide_as_operator
from approvals.models import ApprovalPreference, ApprovalRequest, SiteToolPolicy, ToolGrant
from approvals.policy import policy_for, site_modes
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus, ToolCallFinished
from core.llm import ToolCall
from engine.execution import execute_run, tool_context

pytestmark = pytest.mark.django_db

CALLS = reverse("admin:approvals_approvalrequest_changelist")
POLICIES = reverse("admin:approvals_sitetoolpolicy_changelist")
GRANTS = reverse("admin:approvals_toolgrant_changelist")
CODE = {"code": "print(6 * 7)"}


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    """A person here has several runs waiting at once."""
    settings.LOOP_USER_ACTIVE_RUNS = 50


def staff(username: str, *permissions: str) -> User:
    user = User.objects.create_user(username, is_staff=True)
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def waiting_run(user: User, tool: str = "run_code", arguments: dict | None = None) -> AgentRun:
    """A run of `user`'s, in a conversation, parked on its first call as a worker leaves it."""
    ApprovalPreference.objects.update_or_create(
        user=user, defaults={"ask_run_code": True, "ask_write_file": True}
    )
    conversation = new_conversation(user, f"{user.username}'s {tool}")
    run = start_run(user, "a task", model="mock", conversation=conversation)
    run = execute_run(run, llm=ScriptedLLM([call(tool, arguments or CODE), answer("done")]))
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def listed(response) -> list[int]:
    assert response.status_code == 200
    return sorted(row.pk for row in response.context["cl"].result_list)


def act(client: Client, action: str, *requests: ApprovalRequest):
    return client.post(
        CALLS, {"action": action, "_selected_action": [r.pk for r in requests]}, follow=True
    )


def test_staff_set_a_tools_mode_over_loop_approval_which_the_list_shows_read_only(
    client, operator, alice, settings
):
    settings.LOOP_APPROVAL = "run_code=ask,list_files=auto"
    page = client.get(POLICIES).content.decode()
    assert "<code>run_code=ask,list_files=auto</code>" in page
    assert page.count("✋ asks first") == 1  # run_code, from the setting

    added = client.post(
        reverse("admin:approvals_sitetoolpolicy_add"), {"tool": "write_file", "mode": "ask"}
    )
    assert added.status_code == 302
    policy = SiteToolPolicy.objects.get(tool="write_file")
    assert (policy.mode, policy.updated_by) == ("ask", operator)
    assert site_modes()["write_file"] == "ask"
    client.post(reverse("admin:approvals_sitetoolpolicy_add"), {"tool": "run_code", "mode": "auto"})
    assert site_modes()["run_code"] == "auto"  # the console wins over the setting

    run = start_run(alice, "a task", model="mock")
    policy = policy_for(run, tool_context(run))
    write = ToolCall("call_1", "write_file", json.dumps({"path": "a.txt", "content": "x"}))
    assert policy(write).why == "The site asks before every write_file call."
    assert policy(ToolCall("call_2", "run_code", json.dumps(CODE))) is None

    shown = client.get(POLICIES)
    assert {
        row["tool"]: (row["setting"], row["console"], row["mode"]) for row in shown.context["modes"]
    } == {
        "run_code": ("ask", "auto", "auto"),
        "read_file": ("", "", "auto"),
        "write_file": ("", "ask", "ask"),
        "list_files": ("auto", "", "auto"),
        "web_search": ("", "", "auto"),
        "remember": ("", "", "auto"),
    }
    assert "LOOP_APPROVAL says" in shown.content.decode()
    form = client.get(reverse("admin:approvals_sitetoolpolicy_add")).content.decode()
    assert "site's setting, says <code>run_code=ask,list_files=auto</code>" in form
    # Only a tool of this Loop can be given a mode.
    refused = client.post(
        reverse("admin:approvals_sitetoolpolicy_add"), {"tool": "rm", "mode": "ask"}
    )
    assert refused.status_code == 200
    assert not SiteToolPolicy.objects.filter(tool="rm").exists()


def test_staff_without_the_permission_cannot_set_a_mode(alice):
    viewer = logged_in(staff("viewer", "approvals.view_sitetoolpolicy"))
    assert viewer.get(POLICIES).status_code == 200
    add = reverse("admin:approvals_sitetoolpolicy_add")
    assert viewer.post(add, {"tool": "run_code", "mode": "ask"}).status_code == 403
    assert not SiteToolPolicy.objects.exists()


def test_the_audit_lists_filters_and_searches_the_calls(client, operator, alice, bob, workspaces):
    code = waiting_run(alice)
    write = waiting_run(bob, "write_file", {"path": "plans.txt", "content": "world"})
    decided = waiting_run(alice)
    [code_call], [write_call], [decided_call] = (r.approvals.all() for r in (code, write, decided))
    decide(
        alice,
        decided.pk,
        [CallDecision(decided_call.call_id, Decision.DENY, decided_call.digest, reason="no")],
    )

    everything = client.get(CALLS)
    assert listed(everything) == sorted([code_call.pk, write_call.pk, decided_call.pk])
    page = everything.content.decode()
    assert f'href="{reverse("admin:agent_agentrun_change", args=[code.pk])}"' in page
    assert "⛔ deny" in page
    assert "… waiting" in page
    assert listed(client.get(CALLS, {"decision": "waiting"})) == [code_call.pk, write_call.pk]
    assert listed(client.get(CALLS, {"decision": "deny"})) == [decided_call.pk]
    assert listed(client.get(CALLS, {"tool": "write_file"})) == [write_call.pk]
    assert listed(client.get(CALLS, {"q": str(code.pk)})) == [code_call.pk]
    assert listed(client.get(CALLS, {"q": "write"})) == [write_call.pk]
    assert listed(client.get(CALLS, {"q": "9" * 30})) == []  # no run has it: no error either

    one = client.get(reverse("admin:approvals_approvalrequest_change", args=[decided_call.pk]))
    assert one.status_code == 200
    shown = one.content.decode()
    assert decided_call.digest in shown
    assert "print(6 * 7)" in shown


def test_the_audit_and_the_grants_are_read_only_and_only_a_superuser_deletes_them(
    client, operator, alice, workspaces
):
    run = waiting_run(alice)
    [request] = run.approvals.all()
    decide(
        alice,
        run.pk,
        [CallDecision(request.call_id, Decision.APPROVE, request.digest, always=True)],
    )
    grant = ToolGrant.objects.get()
    viewer = logged_in(
        staff(
            "viewer",
            "approvals.view_approvalrequest",
            "approvals.view_toolgrant",
            "agent.change_agentrun",
        )
    )
    for model, obj in ((ApprovalRequest, request), (ToolGrant, grant)):
        name = f"admin:approvals_{model._meta.model_name}"
        before = list(model.objects.values())
        change = reverse(f"{name}_change", args=[obj.pk])
        delete = reverse(f"{name}_delete", args=[obj.pk])
        selected = {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"}
        for who in (client, viewer):  # a superuser too: no add or change form
            assert who.post(reverse(f"{name}_add"), {"tool": "run_code"}).status_code == 403
            assert who.get(change).status_code == 200
            crafted = {"decision": "deny", "revoked_at": "2026-01-01"}
            assert who.post(change, crafted).status_code == 403
        assert viewer.post(delete, {"post": "yes"}).status_code == 403
        viewer.post(reverse(f"{name}_changelist"), selected)
        assert list(model.objects.values()) == before
    assert listed(client.get(GRANTS, {"state": "live"})) == [grant.pk]
    assert listed(client.get(GRANTS, {"state": "revoked"})) == []

    # A superuser deletes a run with its audit rows (as every audit record), and a person.
    runs = reverse("admin:agent_agentrun_delete", args=[run.pk])
    assert client.post(runs, {"post": "yes"}).status_code == 302
    assert not ApprovalRequest.objects.exists()
    people = reverse("admin:auth_user_delete", args=[alice.pk])
    assert client.post(people, {"post": "yes"}).status_code == 302
    assert not ToolGrant.objects.exists()


def test_an_operator_denies_waiting_calls_and_their_run_goes_back_to_the_queue(alice, workspaces):
    operator = staff("operator", "approvals.view_approvalrequest", "agent.change_agentrun")
    client = logged_in(operator)
    run = waiting_run(alice)
    [request] = run.approvals.all()
    page = client.get(CALLS).content.decode()
    assert "Deny the selected waiting calls" in page
    assert "Approve on the person" not in page

    response = act(client, "deny_calls", request)
    assert "Denied 1 call." in response.content.decode()
    request.refresh_from_db()
    assert (request.decision, request.decided_by) == (Decision.DENY, operator)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.job_id is not None  # a worker will take it

    # A second denial of the same call changes nothing, and says so.
    again = act(client, "deny_calls", request).content.decode()
    assert "1 had been decided already" in again
    request.refresh_from_db()
    assert request.decided_by == operator

    # The run goes on: its model reads the denial, as a tool result, and adapts.
    run = execute_run(run, llm=ScriptedLLM([answer("I will not run it, then.")]))
    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "I will not run it, then.")
    [finished] = [row.event for row in run.events.filter(kind=ToolCallFinished.kind)]
    assert finished.status == "denied"
    assert finished.text == "by an operator of this site: the call was stopped from the console."
    assert list(run.tool_executions.values_list("tool", "status")) == [("run_code", "denied")]


def test_approving_on_a_persons_behalf_needs_a_permission_of_its_own(alice, workspaces):
    operator = staff("operator", "approvals.view_approvalrequest", "agent.change_agentrun")
    client = logged_in(operator)
    run = waiting_run(alice)
    [request] = run.approvals.all()

    act(client, "approve_calls", request)  # not offered: a crafted POST of it does nothing
    request.refresh_from_db()
    run.refresh_from_db()
    assert (request.decision, run.status) == ("", RunStatus.AWAITING_APPROVAL)
    approve = CallDecision(request.call_id, Decision.APPROVE, request.digest)
    with pytest.raises(PermissionDenied) as refused:
        decide_as_operator(operator, run.pk, [approve])
    assert "may not approve" in str(refused.value)

    viewer = logged_in(staff("viewer", "approvals.view_approvalrequest"))
    act(viewer, "deny_calls", request)  # may read the audit, not stop a run
    request.refresh_from_db()
    assert request.decision == ""

    trusted = staff(
        "trusted",
        "approvals.view_approvalrequest",
        "agent.change_agentrun",
        "approvals.decide_for_others",
    )
    trusted_client = logged_in(trusted)
    assert "Approve on the person" in trusted_client.get(CALLS).content.decode()
    response = act(trusted_client, "approve_calls", request)
    assert "Approved 1 call." in response.content.decode()
    request.refresh_from_db()
    run.refresh_from_db()
    assert (request.decision, request.decided_by, run.status) == (
        Decision.APPROVE,
        trusted,
        RunStatus.QUEUED,
    )


def queries(client: Client, url: str) -> int:
    client.get(url)  # warm: content types and the like are cached after the first request
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200, url
    return len(captured)


def test_the_console_pages_answer_with_as_many_queries_for_many_rows(
    client, operator, alice, bob, workspaces, django_assert_max_num_queries
):
    def calls_and_grants(user: User) -> None:
        run = waiting_run(user)
        [request] = run.approvals.all()
        always = CallDecision(request.call_id, Decision.APPROVE, request.digest, always=True)
        decide(user, run.pk, [always], queue_it=False)
        waiting_run(user, "write_file", {"path": "a.txt", "content": "a"})
        SiteToolPolicy.objects.get_or_create(tool="web_search", defaults={"mode": "ask"})

    calls_and_grants(alice)
    first = ApprovalRequest.objects.order_by("pk").first()
    pages = [
        reverse("admin:index"),
        CALLS,
        f"{CALLS}?decision=waiting",
        f"{CALLS}?tool=run_code",
        f"{CALLS}?q=run",
        POLICIES,
        GRANTS,
        reverse("admin:approvals_approvalrequest_change", args=[first.pk]),
        reverse("admin:agent_agentrun_change", args=[first.run_id]),
    ]
    few = {url: queries(client, url) for url in pages}
    for n in range(3):
        calls_and_grants(User.objects.create_user(f"more{n}"))
    SiteToolPolicy.objects.create(tool="remember", mode="auto", updated_by=bob)
    assert ApprovalRequest.objects.count() == 8
    assert ToolGrant.objects.count() == 4
    for url, count in few.items():
        client.get(url)
        with django_assert_max_num_queries(count):
            assert client.get(url).status_code == 200, url
    index = client.get(reverse("admin:index")).content.decode()
    assert f'href="{CALLS}?decision=waiting"' in index


def test_the_runs_timeline_shows_each_call_that_asked_and_its_decision(
    client, operator, alice, workspaces
):
    run = waiting_run(alice)
    [request] = run.approvals.all()
    denial = CallDecision(request.call_id, Decision.DENY, request.digest, reason="not today")
    decide(alice, run.pk, [denial])
    page = client.get(reverse("admin:agent_agentrun_change", args=[run.pk])).content.decode()
    audit = reverse("admin:approvals_approvalrequest_change", args=[request.pk])
    asked = page.split('class="loop-event loop-kind-approval_requested"')[1].split("</li>")[0]
    assert "… waiting</span> <code>run_code</code> waits for its person's decision" in asked
    assert "You asked to decide before run_code runs." in asked
    assert f'<a href="{audit}">approval request {request.pk}</a>' in asked
    decided = page.split('class="loop-event loop-kind-approval_decided"')[1].split("</li>")[0]
    assert "⛔ deny</span> <code>run_code</code> by alice" in decided
    assert "not today" in decided
    assert f'<a href="{audit}">approval request {request.pk}</a>' in decided
    assert "loop-unknown" not in page
    listed_events = client.get(
        reverse("admin:agent_runevent_changelist"), {"run__id__exact": run.pk}
    ).content.decode()
    assert "run_code waits for a decision: You asked to decide before run_code runs." in (
        listed_events
    )
    assert "run_code denied by alice: not today" in listed_events


@pytest.mark.parametrize(
    ("old", "page"),
    [
        ("/admin/agent/approvalrequest/?decision=waiting", CALLS + "?decision=waiting"),
        ("/admin/agent/approvalrequest/7/change/", "admin:approvals_approvalrequest_change"),
        ("/admin/agent/sitetoolpolicy/add/", "admin:approvals_sitetoolpolicy_add"),
        ("/admin/agent/toolgrant/", GRANTS),
    ],
)
def test_the_consoles_old_addresses_of_approvals_lead_to_their_pages(client, operator, old, page):
    """The pages were the agent app's until approvals had an app of their own: an old bookmark
    or link is sent on, permanently, to the same page, its query kept."""
    if page.startswith("admin:"):
        page = reverse(page, args=[7] if page.endswith("_change") else [])
    moved = client.get(old)
    assert (moved.status_code, moved["Location"]) == (301, page)


def test_the_agent_apps_own_console_pages_stay_where_they_are(client, operator):
    runs = reverse("admin:agent_agentrun_changelist")
    assert runs.startswith("/admin/agent/")
    assert client.get(runs).status_code == 200
