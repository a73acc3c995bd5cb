"""Deciding on "Waiting for you" (chat/waiting.py): each waiting call, of a conversation or of a
run started in a terminal, shows as the chat's card (its code highlighted, Approve, Deny, Edit),
and a decision sent from there takes the call off the list and the counts down, or, past its
deadline, says so and for how long a call waits. The runs are worked here by a scripted model
up to their wait; tests/test_browser_waiting.py decides them in Chromium with a real worker."""

import re

import pytest

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from agent.runs import start_run
from approvals.models import ApprovalPreference, ApprovalRequest
from core.events import Decision, RunStatus
from engine.execution import execute_run
from tests.test_approval_cards import HTMX, decision, parked
from tests.test_approval_deadline import asked_ago

pytestmark = pytest.mark.django_db

WAITING = "/waiting/"
CODE = {"code": "print(6 * 7)"}


@pytest.fixture(autouse=True)
def asks(settings, workspaces, alice):
    """alice asked to decide before her code runs (so she may always allow it in a
    conversation); she may have several runs waiting."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    settings.LOOP_USER_ACTIVE_RUNS = 10


def from_terminal(user) -> AgentRun:
    """A run as `manage.py runagent` leaves it with no one at its terminal: in no conversation,
    waiting on its first call."""
    run = start_run(user, "Work out 6 * 7", model="mock")
    run = execute_run(run, llm=ScriptedLLM([call("run_code", CODE), answer("42")]))
    assert (run.status, run.conversation_id) == (RunStatus.AWAITING_APPROVAL, None)
    return run


def listed(run: AgentRun, choice: str, **fields) -> dict[str, str]:
    """A decision as the list's card sends it."""
    return {**decision(run, choice, **fields), "listed": "1"}


def test_each_waiting_call_shows_as_its_card_with_the_forms_to_decide(alice, as_alice):
    chat = parked(alice, call("run_code", CODE), answer("42"), task="Sums")
    terminal = from_terminal(alice)
    page = as_alice.get(WAITING).text
    assert "<title>(2) Waiting for you" in page
    assert page.count('class="card approval waiting"') == 2
    assert page.count('<button type="submit" name="decision" value="approve"') == 2
    assert page.count('<button type="submit" name="decision" value="deny"') == 2
    assert page.count("Edit and approve") == 2
    assert page.count('<input type="hidden" name="listed" value="1">') == 4  # both forms of each
    assert '<span class="nb">print</span>' in page  # the code highlighted, not raw JSON
    assert '{"code"' not in page
    assert f'action="/runs/{chat.pk}/decide/"' in page
    assert f'action="/runs/{terminal.pk}/decide/"' in page
    assert "A run you started in a terminal: “Work out 6 * 7”" in page
    # Always allowing a tool is for a conversation: the terminal's run has none.
    assert page.count("Always allow run_code in this conversation") == 2  # its two forms
    assert '<span class="count">2</span>' in page  # the header's count
    assert "runagent" not in page  # no command on a person's page


@pytest.mark.parametrize("choice", ["approve", "deny"])
def test_a_decision_from_the_list_takes_the_call_off_it_and_the_counts_down(
    alice, as_alice, choice
):
    first = parked(alice, call("run_code", CODE), answer("42"), task="Sums")
    terminal = from_terminal(alice)
    [request] = terminal.approvals.all()
    answered = as_alice.post(f"/runs/{terminal.pk}/decide/", listed(terminal, choice), **HTMX)
    assert answered.status_code == 200
    body = answered.text
    assert f'<li id="waiting-{request.pk}" hx-swap-oob="delete"></li>' in body
    said = "Approved: the run_code call runs." if choice == "approve" else "Denied: the run_code"
    assert said in body
    assert re.search(r'id="waiting-summary" hx-swap-oob="true">1 tool call waits', body)
    assert re.search(r'data-count="1" hx-swap-oob="true" id="waiting-link"', body)
    assert AgentRun.objects.get(pk=terminal.pk).status == RunStatus.QUEUED  # a worker takes it
    assert ApprovalRequest.objects.get(pk=request.pk).decision == choice

    # The last one decided: nothing waits, and the list says so.
    answered = as_alice.post(f"/runs/{first.pk}/decide/", listed(first, choice), **HTMX)
    assert f'href="/c/{first.conversation_id}/#run-{first.pk}">See its run.</a>' in answered.text
    assert "No tool call waits for your decision." in answered.text
    assert 'data-count="0"' in answered.text
    assert "No tool call waits for your decision." in as_alice.get(WAITING).text


def test_without_the_pages_script_a_decision_comes_back_to_the_list(alice, as_alice):
    terminal = from_terminal(alice)
    answered = as_alice.post(f"/runs/{terminal.pk}/decide/", listed(terminal, "approve"))
    assert (answered.status_code, answered.url) == (302, WAITING)


def test_a_decision_past_its_deadline_says_so_and_how_long_a_call_waits(alice, as_alice, settings):
    settings.LOOP_APPROVAL_SECONDS = 600
    terminal = from_terminal(alice)
    page = as_alice.get(WAITING).text
    assert "a call nobody decides on within 10 minutes does not run" in page
    asked_ago(terminal.approvals.get(), 601)  # the page stayed open past the deadline
    refused = as_alice.post(f"/runs/{terminal.pk}/decide/", listed(terminal, "approve"), **HTMX)
    assert refused.status_code == 400
    assert "This request expired at" in refused.text
    assert "nobody decided within 10 minutes, so the run_code call did not run" in refused.text
    assert AgentRun.objects.get(pk=terminal.pk).status == RunStatus.HALTED
    assert terminal.approvals.get().decision == Decision.EXPIRED
    # Without the page's script, the list says it, the call gone from it.
    refused = as_alice.post(f"/runs/{terminal.pk}/decide/", listed(terminal, "deny"))
    assert refused.status_code == 400
    assert "nobody decided within 10 minutes" in refused.text
    assert "No tool call waits for your decision." in refused.text
