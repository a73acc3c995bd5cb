"""A person's approval settings and their "Waiting for you" list (accounts/approvals.py,
chat/waiting.py): choices saved on the account and read by the next run's policy, never below
what the site requires; "always allow" grants listed and revoked, only by their owner; every
waiting call of the person's, and no one else's, in a bounded number of queries."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.runs import new_conversation, start_run
from approvals.decisions import decide
from approvals.models import ApprovalPreference, ApprovalRequest, SiteToolPolicy, ToolGrant
from approvals.policy import granted_tools, policy_for
from approvals.selectors import waiting_for
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from core.llm import ToolCall
from engine.execution import execute_run, tool_context
from tests.test_my_data_export import exported, read_json

pytestmark = pytest.mark.django_db

SETTINGS = "/settings/approvals/"
REVOKE = "/settings/approvals/revoke/"
WAITING = "/waiting/"
CODE = {"code": "print(6 * 7)"}
PERSON_WHY = "You asked to decide before run_code runs."
SITE_WHY = "The site asks before every run_code call."


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    """Each test starts more runs than one person may have going at once: runs that wait, and
    the runs the policy is read for."""
    settings.LOOP_USER_ACTIVE_RUNS = 50


def checkbox(page: str, name: str) -> str:
    """The <input> of that choice, as the page draws it."""
    [found] = re.findall(rf'<input[^>]*name="{name}"[^>]*>', page)
    return found


def asks(user: User, tool: str = "run_code", arguments: dict | None = None) -> str | None:
    """Why a new run of `user` would ask before that call, through the site's own policy (None:
    it runs without asking)."""
    run = start_run(user, "a task", model="mock")
    ask = policy_for(run, tool_context(run))(
        ToolCall("call_1", tool, json.dumps(arguments or CODE))
    )
    return None if ask is None else ask.why


def waiting_run(user: User, title: str, tool: str = "run_code", arguments: dict | None = None):
    """A run of `user` in a new conversation, parked on its first call, as a worker leaves it."""
    conversation = new_conversation(user, title)
    run = start_run(user, f"task of {title}", model="mock", conversation=conversation)
    script = ScriptedLLM([call(tool, arguments or CODE), answer("done")])
    run = execute_run(run, llm=script)
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def test_a_choice_saved_on_the_page_makes_the_next_run_ask_with_the_persons_why(
    as_alice, alice, workspaces
):
    assert asks(alice) is None
    page = as_alice.get(SETTINGS).text
    assert "Ask me before running code" in page
    assert "Ask me before any tool" in page
    assert "checked" not in checkbox(page, "ask_run_code")

    response = as_alice.post(SETTINGS, {"ask_run_code": "on"})
    assert response.status_code == 302
    assert response.url == SETTINGS
    stored = ApprovalPreference.objects.get(user=alice)
    assert (stored.ask_run_code, stored.ask_write_file, stored.ask_any_tool) == (True, False, False)
    assert asks(alice) == PERSON_WHY
    assert asks(alice, "list_files", {}) is None
    assert "checked" in checkbox(as_alice.get(SETTINGS).text, "ask_run_code")

    # A real run parks on that call with the person's reason, its code not run.
    run = waiting_run(alice, "Sums")
    [request] = run.approvals.all()
    assert (request.tool, request.why, request.decision) == ("run_code", PERSON_WHY, "")
    assert not run.tool_executions.exists()

    as_alice.post(SETTINGS, {"ask_any_tool": "on"})
    assert asks(alice) == PERSON_WHY
    assert asks(alice, "list_files", {}) == "You asked to decide before list_files runs."
    as_alice.post(SETTINGS, {})
    assert asks(alice) is None
    assert asks(alice, "list_files", {}) is None


def test_a_choice_the_site_requires_is_shown_checked_disabled_and_saying_so(
    as_alice, alice, settings
):
    settings.LOOP_APPROVAL = "run_code=ask"
    SiteToolPolicy.objects.create(tool="write_file", mode="ask")
    page = as_alice.get(SETTINGS).text
    for name in ("ask_run_code", "ask_write_file"):
        assert "checked" in checkbox(page, name)
        assert "disabled" in checkbox(page, name)
    assert "disabled" not in checkbox(page, "ask_any_tool")
    assert page.count("The site requires it") == 2

    settings.LOOP_APPROVAL = ",".join(
        f"{tool}={'auto' if tool == 'run_code' else 'ask'}"
        for tool in ("run_code", "read_file", "list_files", "web_search", "remember")
    )
    page = as_alice.get(SETTINGS).text
    assert "disabled" not in checkbox(page, "ask_run_code")  # the site lets it run
    SiteToolPolicy.objects.create(tool="run_code", mode="ask")
    page = as_alice.get(SETTINGS).text
    assert all("disabled" in checkbox(page, name) for name in ("ask_run_code", "ask_any_tool"))


def test_a_post_cannot_ask_for_less_than_the_site_requires(as_alice, alice, settings):
    ApprovalPreference.objects.create(user=alice, ask_write_file=True)
    settings.LOOP_APPROVAL = "run_code=ask"
    SiteToolPolicy.objects.create(tool="write_file", mode="ask")

    # Unchecking both (posting none of them) changes neither; the choice it may make is saved.
    assert as_alice.post(SETTINGS, {"ask_any_tool": "on"}).status_code == 302
    stored = ApprovalPreference.objects.get(user=alice)
    assert (stored.ask_run_code, stored.ask_write_file, stored.ask_any_tool) == (False, True, True)
    assert asks(alice) == SITE_WHY
    assert "checked" in checkbox(as_alice.get(SETTINGS).text, "ask_run_code")

    # The person's own choice kept under the site's applies once the site stops asking.
    as_alice.post(SETTINGS, {})
    SiteToolPolicy.objects.filter(tool="write_file").delete()
    assert asks(alice, "write_file", {"path": "notes.txt", "content": "x"}) == (
        "You asked to decide before write_file runs."
    )
    settings.LOOP_APPROVAL = ""
    assert asks(alice) is None


def always_allowed(user: User, title: str):
    """A conversation of `user` where they approved a run_code call with "always allow"."""
    ApprovalPreference.objects.update_or_create(user=user, defaults={"ask_run_code": True})
    run = waiting_run(user, title)
    [request] = run.approvals.all()
    always = CallDecision(request.call_id, Decision.APPROVE, request.digest, always=True)
    decide(user, run.pk, [always], queue_it=False)
    assert granted_tools(run.conversation_id) == {("run_code", None)}
    return run.conversation


def test_the_page_lists_the_persons_grants_and_revoke_makes_the_tool_ask_again(
    as_alice, alice, bob, workspaces
):
    conversation = always_allowed(alice, "Plots")
    always_allowed(bob, "Bob's secret plans")
    page = as_alice.get(SETTINGS).text
    assert "Plots" in page
    assert f'href="/c/{conversation.pk}/"' in page
    assert "Bob&#x27;s secret plans" not in page
    assert "secret plans" not in page
    assert 'aria-label="Revoke run_code in Plots"' in page

    in_conversation = start_run(alice, "more", model="mock", conversation=conversation)
    assert policy_for(in_conversation, tool_context(in_conversation)).why("run_code") is None

    response = as_alice.post(REVOKE, {"conversation": conversation.pk, "tool": "run_code"})
    assert response.status_code == 302
    assert response.url == SETTINGS
    assert granted_tools(conversation.pk) == set()
    assert ToolGrant.objects.get(conversation=conversation).revoked_at is not None
    assert policy_for(in_conversation, tool_context(in_conversation)).why("run_code") == PERSON_WHY
    page = as_alice.get(SETTINGS).text
    assert "Revoked" in page
    assert "No tool is always allowed" in page
    # Revoked already: nothing left to revoke.
    assert (
        as_alice.post(REVOKE, {"conversation": conversation.pk, "tool": "run_code"}).status_code
        == 404
    )


def test_nobody_revokes_another_persons_grant(as_alice, alice, bob, workspaces):
    conversation = always_allowed(alice, "Plots")
    as_bob = Client()
    as_bob.force_login(bob)
    refused = as_bob.post(REVOKE, {"conversation": conversation.pk, "tool": "run_code"})
    assert refused.status_code == 404
    assert granted_tools(conversation.pk) == {("run_code", None)}
    assert "Plots" not in as_bob.get(SETTINGS).text
    malformed_posts = (
        {},
        {"conversation": "x", "tool": "run_code"},
        {"conversation": "1"},
        {"conversation": "9" * 30, "tool": "run_code"},
    )
    for malformed in malformed_posts:
        assert as_bob.post(REVOKE, malformed).status_code == 404
    assert ToolGrant.objects.filter(revoked_at__isnull=True).count() == 1


def test_the_pages_need_a_login_and_their_forms_a_csrf_token(alice):
    anonymous = Client()
    for url in (SETTINGS, WAITING):
        response = anonymous.get(url)
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
    assert anonymous.post(SETTINGS, {"ask_run_code": "on"}).status_code == 302
    careful = Client(enforce_csrf_checks=True)
    careful.force_login(alice)
    assert careful.post(SETTINGS, {"ask_run_code": "on"}).status_code == 403
    assert careful.post(REVOKE, {"conversation": "1", "tool": "run_code"}).status_code == 403
    assert not ApprovalPreference.objects.filter(user=alice).exists()
    page = careful.get(SETTINGS).text
    choices = page[page.index('class="approval-choices"') :]
    assert choices.index('name="csrfmiddlewaretoken"') < choices.index("</form>")


def test_waiting_for_you_lists_every_call_of_the_persons_and_no_one_elses(
    as_alice, alice, bob, workspaces, django_assert_max_num_queries
):
    for person in (alice, bob):
        ApprovalPreference.objects.create(user=person, ask_run_code=True, ask_write_file=True)
    sums = waiting_run(alice, "Sums")
    notes = waiting_run(alice, "Notes", "write_file", {"path": "todo.txt", "content": "milk"})
    waiting_run(bob, "Bob's plans")

    # The page, its calls, the site policy, the header count, and whether any tool is on hold.
    with django_assert_max_num_queries(7):
        page = as_alice.get(WAITING).text
    assert "<title>(2) Waiting for you" in page
    assert page.index("Sums") < page.index("Notes")  # oldest first
    assert f'href="/c/{sums.conversation_id}/#run-{sums.pk}"' in page
    assert f'href="/c/{notes.conversation_id}/#run-{notes.pk}"' in page
    assert '<strong class="tool-name">write_file</strong>' in page
    assert "todo.txt" in page
    assert "You asked to decide before write_file runs." in page
    assert "Bob" not in page
    assert {r.run_id for r in waiting_for(alice)} == {sums.pk, notes.pk}

    # As many queries for many calls as for two.
    for n in range(4):
        waiting_run(alice, f"More {n}")
    with django_assert_max_num_queries(7):
        page = as_alice.get(WAITING).text
    assert page.count('class="waiting-call"') == 6

    # The chat's sidebar links to it with the count; a decided call leaves the list.
    chat = as_alice.get("/").text
    assert re.search(r'id="waiting-link">Waiting for you <span class="count"[^>]*>6</span>', chat)
    assert "<title>(6) Loop</title>" in chat
    [request] = sums.approvals.all()
    decide(alice, sums.pk, [CallDecision(request.call_id, Decision.DENY, request.digest)])
    assert f"#run-{sums.pk}" not in as_alice.get(WAITING).text
    assert ApprovalRequest.objects.filter(run__user=alice, decision="").count() == 5


def test_nothing_waiting_says_so(as_alice):
    page = as_alice.get(WAITING).text
    assert "No tool call waits for your decision." in page
    assert "<title>Waiting for you" in page
    chat = as_alice.get("/").text
    assert 'class="count"' not in chat
    assert "<title>Loop</title>" in chat


def test_the_settings_page_costs_as_many_queries_for_many_grants_as_for_one(
    as_alice, alice, workspaces, django_assert_max_num_queries
):
    always_allowed(alice, "First")
    as_alice.get(SETTINGS)  # warm: content types and the like are cached after the first request
    with CaptureQueriesContext(connection) as one:
        as_alice.get(SETTINGS)
    for n in range(3):
        always_allowed(alice, f"More {n}")
    with django_assert_max_num_queries(len(one)):
        page = as_alice.get(SETTINGS).text
    assert page.count(">Revoke</button>") == 4


def test_the_persons_export_holds_their_approval_settings_and_grants_only(
    as_alice, alice, bob, workspaces
):
    conversation = always_allowed(alice, "Plots")
    always_allowed(bob, "Bob's plans")
    as_alice.post(SETTINGS, {"ask_write_file": "on"})
    as_alice.post(REVOKE, {"conversation": conversation.pk, "tool": "run_code"})
    approvals = read_json(exported(as_alice), "account.json")["approvals"]
    [grant] = approvals.pop("always_allowed")
    assert approvals == {"ask_run_code": False, "ask_write_file": True, "ask_any_tool": False}
    assert (grant["conversation"], grant["tool"]) == (conversation.pk, "run_code")
    assert grant["revoked_at"] is not None
