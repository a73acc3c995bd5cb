"""The chat's side of calls that wait for a person's decision: the card a waiting call shows (its
code highlighted, a write's diff against the person's file), the decisions its forms send through
POST /runs/<id>/decide/ (approve, edit, deny, approve all), what the view refuses (an invalid
edit, a second decision, a replayed form, a wrong digest, another person's run, a form without
its CSRF token) with nothing changed, the card once decided (answered, pushed, reloaded), the
title's count and the sidebar's mark. Runs are parked and worked in this process, with a real
sandbox, by engine.execution (tests/test_engine.py)."""

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent.llm.scripted import ScriptedLLM, answer, call, calls
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from agent.selectors import events_of
from approvals.decisions import decide_as_operator, expire_waiting, moment_words
from approvals.models import ApprovalPreference, ApprovalRequest, ToolGrant
from approvals.waiting import CallDecision
from chat.stream import read_unsent
from core.events import ApprovalDecided, Decision, ToolCallFinished
from core.results import ToolStatus
from engine.execution import execute_run
from tools.code import parse_report
from tools.context import context_for

pytestmark = pytest.mark.django_db

CODE = "print(6 * 7)"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def asks(settings, workspaces):
    """The site asks before every run_code and write_file call."""
    settings.LOOP_APPROVAL = "run_code=ask,write_file=ask"


def parked(user, *replies, task="Compute it") -> AgentRun:
    """A run of `user` that waits for their decision, worked here up to its wait."""
    run = start_run(user, task, model="mock", conversation=new_conversation(user, task))
    run = execute_run(run, llm=ScriptedLLM(replies))
    assert run.status == "awaiting_approval"
    return run


def worked(run: AgentRun, *replies) -> AgentRun:
    """The run, decided and queued again, worked on from its log by the replies that follow."""
    return execute_run(AgentRun.objects.get(pk=run.pk), llm=ScriptedLLM(replies))


def decision(run: AgentRun, choice: str, request: ApprovalRequest | None = None, **fields):
    """A card's form as the page draws it, with `choice` pressed."""
    request = request or run.approvals.get()
    return {"call": request.call_id, "digest": request.digest, "decision": choice, **fields}


def decide(client, run: AgentRun, form: dict, **headers):
    return client.post(f"/runs/{run.pk}/decide/", form, **HTMX, **headers)


def finished_calls(run: AgentRun) -> list[ToolCallFinished]:
    return [event for _, event in events_of(run) if isinstance(event, ToolCallFinished)]


def stdout(ran: ToolCallFinished) -> str:
    report = parse_report(ran.text)
    assert report is not None, ran.text
    return report.stdout.strip()


def unchanged(run: AgentRun) -> None:
    """Nothing was decided: the call still waits, the run with it, its log without a decision."""
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert list(run.approvals.values_list("decision", flat=True)) == [""] * run.approvals.count()
    assert not [e for _, e in events_of(run) if isinstance(e, ApprovalDecided)]
    assert not ToolGrant.objects.exists()


def card_html(page: str, run: AgentRun, request: ApprovalRequest) -> str:
    card_id = f"approval-{run.pk}-{request.step}-{request.call_id}"
    found = re.search(
        rf'<article class="card approval[^"]*" id="{card_id}".*?</article>', page, re.S
    )
    assert found, f"no card {card_id}"
    return found.group(0)


def test_a_waiting_run_code_call_shows_its_code_highlighted_and_the_forms_to_decide(
    asks, alice, as_alice
):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    card = card_html(page, run, request)
    assert "The site asks before every run_code call." in card
    assert '<span class="nb">print</span>' in card  # Pygments' builtin, highlighted on the server
    assert f'name="digest" value="{request.digest}"' in card
    assert 'value="approve"' in card
    assert 'value="deny"' in card
    assert 'value="edit"' in card
    assert (
        f'<textarea id="approval-{run.pk}-{request.step}-{request.call_id}-edit" name="code"'
        in card
    )
    assert "Always allow" not in card  # the site asks: it cannot be always allowed
    assert "<title>(1) Compute it · Loop</title>" in page
    assert "1 call waits for your decision" in page
    assert 'class="icon status-awaiting_approval"' in page  # the sidebar's mark
    assert "Waiting for your decision" in page


def test_a_call_the_person_asked_about_may_be_always_allowed(settings, workspaces, alice, as_alice):
    settings.LOOP_APPROVAL = ""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    run = parked(alice, call("run_code", {"code": CODE}), answer("The answer is 42."))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert "Always allow run_code in this conversation" in card_html(page, run, run.approvals.get())
    answered = decide(as_alice, run, decision(run, "approve", always="1"))
    assert answered.status_code == 200
    [grant] = ToolGrant.objects.all()
    assert (grant.conversation_id, grant.tool) == (run.conversation_id, "run_code")


def test_approved_the_call_runs_once_and_its_card_shows_the_decision_then_and_on_reload(
    asks, alice, as_alice
):
    run = parked(alice, call("run_code", {"code": CODE}), answer("The answer is 42."))
    answered = decide(as_alice, run, decision(run, "approve"))
    assert answered.status_code == 200
    request = run.approvals.get()
    assert request.decision == Decision.APPROVE
    assert 'hx-swap-oob="true"' in answered.text  # the card replaces its waiting self
    assert "Approved" in answered.text
    assert 'name="decision"' not in answered.text
    assert 'id="waiting-count" data-count="0"' in answered.text
    run.refresh_from_db()
    assert run.status == "queued"

    run = worked(run, answer("The answer is 42."))
    assert run.status == "succeeded"
    [ran] = finished_calls(run)
    assert (ran.status, stdout(ran)) == (ToolStatus.OK, "42")
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    card = card_html(page, run, request)
    assert "Approved" in card
    assert "<form" not in card
    assert "<title>Compute it · Loop</title>" in page


def test_edited_the_call_runs_with_the_persons_code(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("done"))
    # A browser sends a textarea's line breaks as CRLF.
    edited = "x = 6 * 8\r\nprint(x)\r\n"
    answered = decide(as_alice, run, decision(run, "edit", code=edited))
    assert answered.status_code == 200
    assert "Edited and approved" in answered.text
    request = run.approvals.get()
    assert json.loads(request.edited_arguments) == {"code": "x = 6 * 8\nprint(x)\n"}

    run = worked(run, answer("done"))
    [ran] = finished_calls(run)
    assert (ran.status, stdout(ran), ran.edited) == (ToolStatus.OK, "48", True)
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, request)
    assert "Edited and approved" in card
    assert "It runs with your code" in card
    assert '<span class="n">x</span>' in card


def test_denied_the_call_never_runs_and_its_card_says_why(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("I will not run it, then."))
    answered = decide(as_alice, run, decision(run, "deny", reason="not on my machine"))
    assert answered.status_code == 200
    assert "You declined this call" in answered.text
    assert "Reason: not on my machine" in answered.text
    run = worked(run, answer("I will not run it, then."))
    [denied] = finished_calls(run)
    assert (denied.status, denied.text) == (ToolStatus.DENIED, "by the person: not on my machine")
    assert run.answer == "I will not run it, then."


def test_approve_all_decides_every_waiting_call_of_the_reply(asks, alice, as_alice):
    reply = calls(("run_code", {"code": "print(1)"}), ("run_code", {"code": "print(2)"}))
    run = parked(alice, reply, answer("both"))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert "2 calls wait:" in page
    assert "Approve all" in page
    assert "Deny all" in page
    assert "<title>(2) Compute it · Loop</title>" in page
    first, second = run.approvals.order_by("pk")
    form = {
        "call": [first.call_id, second.call_id],
        "digest": [first.digest, second.digest],
        "decision": "approve",
    }
    answered = decide(as_alice, run, form)
    assert answered.status_code == 200
    assert answered.text.count("Approved") == 2
    assert set(run.approvals.values_list("decision", flat=True)) == {Decision.APPROVE}
    run = worked(run, answer("both"))
    assert [stdout(ran) for ran in finished_calls(run)] == ["1", "2"]


def test_an_invalid_edit_is_refused_with_the_reason_and_changes_nothing(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    refused = decide(as_alice, run, decision(run, "edit", code=""))
    assert refused.status_code == 400
    assert "The edited arguments do not fit run_code: code:" in refused.text
    unchanged(run)


def test_a_json_edit_that_is_not_json_is_refused(settings, workspaces, alice, as_alice):
    settings.LOOP_APPROVAL = "list_files=ask"
    run = parked(alice, call("list_files", {}), answer("never"))
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert 'name="arguments"' in card_html(page, run, run.approvals.get())
    refused = decide(as_alice, run, decision(run, "edit", arguments="{not json"))
    assert refused.status_code == 400
    assert "not valid JSON" in refused.text
    unchanged(run)


def test_a_second_decision_and_a_replayed_form_are_refused_and_change_nothing(
    asks, alice, as_alice
):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    form = decision(run, "approve")
    assert decide(as_alice, run, form).status_code == 200
    decided = list(events_of(run))
    for again in (form, decision(run, "deny", reason="changed my mind")):
        refused = decide(as_alice, run, again)
        assert refused.status_code == 400
        assert "was decided already (approve)" in refused.text
    assert list(events_of(run)) == decided
    assert run.approvals.get().decision == Decision.APPROVE


def test_a_wrong_digest_is_refused_and_changes_nothing(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    forged = decision(run, "approve") | {"digest": "0" * 64}
    refused = decide(as_alice, run, forged)
    assert refused.status_code == 400
    assert "another version of the run_code call" in refused.text
    unchanged(run)


def test_another_persons_run_is_not_found_and_changes_nothing(asks, alice, bob):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    as_bob = Client()
    as_bob.force_login(bob)
    assert decide(as_bob, run, decision(run, "approve")).status_code == 404
    assert as_bob.post(f"/runs/{run.pk}/decide/", decision(run, "approve")).status_code == 404
    unchanged(run)


def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(asks, alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    assert decide(strict, run, decision(run, "approve")).status_code == 403
    unchanged(run)


def test_without_htmx_a_decision_goes_back_to_the_conversation(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    answered = as_alice.post(f"/runs/{run.pk}/decide/", decision(run, "approve"))
    assert answered.status_code == 302
    assert answered.url == f"/c/{run.conversation_id}/"
    refused = as_alice.post(f"/runs/{run.pk}/decide/", decision(run, "approve"))
    assert refused.status_code == 400
    assert "decided already" in refused.text


def test_a_write_shows_its_diff_against_the_persons_file(asks, alice, as_alice):
    (context_for(alice).workspace / "notes.txt").write_text("milk\neggs\n")
    write = {"path": "notes.txt", "content": "milk\nbread\n"}
    run = parked(alice, call("write_file", write), answer("never"))
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, run.approvals.get())
    assert "It writes <code>notes.txt</code>." in card
    assert '<span class="gd">-eggs</span>' in card
    assert '<span class="gi">+bread</span>' in card
    assert 'name="content"' in card


def test_a_write_to_a_missing_file_shows_it_as_a_new_file(asks, alice, as_alice):
    run = parked(alice, call("write_file", {"path": "new.txt", "content": "hi\n"}), answer("x"))
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, run.approvals.get())
    assert "It writes <code>new.txt</code>, a new file." in card
    assert "hi" in card
    assert 'class="gd"' not in card


def test_the_socket_draws_the_wait_and_the_decision_as_the_page_does(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    waiting = "".join(read_unsent.func(alice, run.pk, 0).frames)
    assert card_html(waiting, run, request).count("<form") == 2
    assert "Waiting for your decision" in waiting  # the run's status, redrawn
    assert 'id="waiting-count" data-count="1"' in waiting
    assert 'class="icon status-awaiting_approval"' in waiting
    seen = events_of(run)[-1].seq
    assert decide(as_alice, run, decision(run, "deny")).status_code == 200
    decided = "".join(read_unsent.func(alice, run.pk, seen).frames)
    card = card_html(decided, run, request)
    assert 'hx-swap-oob="true"' in card
    assert "You declined this call" in card
    assert "<form" not in card
    assert 'id="waiting-count" data-count="0"' in decided


def test_a_socket_that_finds_nothing_new_still_says_the_run_waits(asks, alice):
    """The page may have read the run just before it parked and its events just after: the
    socket's first read, with nothing new, redraws the waiting status (seen once in CI)."""
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    last = events_of(run)[-1].seq
    [frame] = read_unsent.func(alice, run.pk, last).frames
    assert "Waiting for your decision" in frame
    assert 'hx-swap-oob="true"' in frame


def test_the_page_reads_the_same_queries_however_many_conversations_wait(
    asks, settings, alice, as_alice
):
    settings.LOOP_USER_ACTIVE_RUNS = 4  # a waiting run is one of its person's runs going
    first = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    url = f"/c/{first.conversation_id}/"
    as_alice.get(url)
    with CaptureQueriesContext(connection) as one:
        assert as_alice.get(url).status_code == 200
    for n in range(3):
        parked(alice, call("run_code", {"code": CODE}), answer("never"), task=f"Task {n}")
    with CaptureQueriesContext(connection) as four:
        page = as_alice.get(url)
    assert "<title>(4) Compute it · Loop</title>" in page.text
    assert len(four) == len(one)
    # What a page in the background asks to keep its title true.
    assert 'data-count="4"' in as_alice.get("/waiting/count/").text


def test_stopped_while_waiting_the_card_says_the_call_never_ran(asks, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    assert as_alice.post(f"/runs/{run.pk}/stop/", **HTMX).status_code == 200
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    card = card_html(page, run, request)
    assert "Cancelled: the run was stopped, so it did not run" in card
    assert "<form" not in card
    assert "<title>Compute it · Loop</title>" in page
    refused = decide(as_alice, run, decision(run, "approve"))
    assert refused.status_code == 400
    assert "decided already (cancelled)" in refused.text


def test_expired_the_card_says_nobody_decided_in_time(asks, settings, alice, as_alice):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    settings.LOOP_APPROVAL_SECONDS = 0
    assert expire_waiting() == 1
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, run.approvals.get())
    assert "Expired: nobody decided in time, so it did not run" in card
    assert "<form" not in card


def test_a_waiting_card_says_until_when_it_may_be_decided_on_the_page_and_the_socket(
    asks, settings, alice, as_alice
):
    settings.LOOP_APPROVAL_SECONDS = 3 * 60 * 60
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    asked = timezone.now() - timedelta(hours=1)
    ApprovalRequest.objects.filter(pk=request.pk).update(created_at=asked)
    deadline = asked + timedelta(hours=3)
    words = moment_words(deadline)
    assert re.fullmatch(r"(\d{1,2} [A-Z][a-z]{2} )?\d\d:\d\d UTC", words), words
    said = f'Decide by <time datetime="{deadline.isoformat()}">{words}</time> (expires in 1\xa0hour'
    page = as_alice.get(f"/c/{run.conversation_id}/").text
    assert said in card_html(page, run, request)
    pushed = "".join(read_unsent.func(alice, run.pk, 0).frames)
    assert said in card_html(pushed, run, request)


def test_a_card_drawn_past_its_deadline_says_it_expired_and_offers_no_decision(
    asks, settings, alice, as_alice
):
    settings.LOOP_APPROVAL_SECONDS = 45
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    ApprovalRequest.objects.filter(pk=request.pk).update(
        created_at=timezone.now() - timedelta(seconds=46)
    )
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, request)
    assert "This request expired at" in card
    assert "the call will not run" in card
    assert "<form" not in card


def test_an_operators_denial_says_who_denied(asks, alice, as_alice, operator):
    run = parked(alice, call("run_code", {"code": CODE}), answer("never"))
    request = run.approvals.get()
    denial = CallDecision(request.call_id, Decision.DENY, request.digest, reason="not here")
    decide_as_operator(operator, run.pk, [denial])
    card = card_html(as_alice.get(f"/c/{run.conversation_id}/").text, run, request)
    assert "Declined by root" in card
    assert "Reason: not here" in card


def test_one_call_decided_of_three_leaves_the_other_two_to_deny_together(asks, alice, as_alice):
    reply = calls(*(("run_code", {"code": f"print({n})"}) for n in range(3)))
    run = parked(alice, reply, answer("one ran"))
    first, *others = run.approvals.order_by("pk")
    answered = decide(as_alice, run, decision(run, "approve", first))
    assert answered.status_code == 200
    assert "2 calls wait:" in answered.text  # the run's "all" form, for the two left
    assert first.call_id not in answered.text.split('class="decide decide-all"')[1]
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    form = {
        "call": [other.call_id for other in others],
        "digest": [other.digest for other in others],
        "decision": "deny",
        "reason": "one is enough",
    }
    assert decide(as_alice, run, form).status_code == 200
    decided = dict(run.approvals.values_list("call_id", "decision"))
    assert decided == {first.call_id: "approve"} | {other.call_id: "deny" for other in others}
    run = worked(run, answer("one ran"))
    statuses = {ran.call_id: ran.status for ran in finished_calls(run)}
    assert statuses == {first.call_id: "ok"} | {other.call_id: "denied" for other in others}
