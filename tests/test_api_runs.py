"""The API's run operations (api/runs.py): a program starts, reads, lists, stops and continues
its person's runs and decides the calls they wait on, through the same operations as the chat,
refused with the chat's own words and a stable code; another person's runs and conversations are
404, and each run and decision records the key it came through."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, Conversation
from agent.runs import new_conversation, start_run
from api.keys import create_key
from approvals.models import ApprovalPreference, ApprovalRequest, Via
from core.events import RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

CODE = {"code": "print(6 * 7)"}


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    """A person here has several runs going at once (no worker takes them)."""
    settings.LOOP_USER_ACTIVE_RUNS = 50


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def post(client: Client, path: str, body: dict, secret: str):
    return client.post(path, body, content_type="application/json", **bearer(secret))


def error_of(response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def waiting_run(user: User) -> AgentRun:
    """A run of `user`'s parked on a run_code call, as a worker leaves it."""
    ApprovalPreference.objects.update_or_create(user=user, defaults={"ask_run_code": True})
    conversation = new_conversation(user, "asks first")
    run = start_run(user, "a task", model="mock", conversation=conversation)
    run = execute_run(run, llm=ScriptedLLM([call("run_code", CODE), answer("done")]))
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def test_a_run_started_through_the_api_is_queued_and_records_its_key(client, alice, alice_key):
    response = post(client, "/api/v1/runs", {"task": "Add 2 and 2"}, alice_key)

    assert response.status_code == 201
    shown = response.json()
    run = AgentRun.objects.get(pk=shown["id"])
    assert (run.user, run.task, run.status, run.job_id is not None) == (
        alice,
        "Add 2 and 2",
        RunStatus.QUEUED,
        True,
    )
    assert run.api_key == {
        "prefix": alice_key[:16],
        "name": "tests",
        "scopes": ["read", "run", "decide", "files"],
    }
    assert shown["started_with_key"] == alice_key[:16]
    assert shown["conversation"] == run.conversation_id
    assert shown["links"]["events"].endswith(f"/api/v1/runs/{run.pk}/events")
    assert shown["links"]["page"].endswith(f"/c/{run.conversation_id}/")


def test_a_run_goes_on_in_a_conversation_of_the_person(client, alice, alice_key):
    first = post(client, "/api/v1/runs", {"task": "first"}, alice_key).json()
    AgentRun.objects.filter(pk=first["id"]).update(status=RunStatus.SUCCEEDED, answer="one")

    second = post(
        client, "/api/v1/runs", {"task": "second", "conversation": first["conversation"]}, alice_key
    )

    assert second.status_code == 201
    run = AgentRun.objects.get(pk=second.json()["id"])
    assert (run.conversation_id, run.parent_id) == (first["conversation"], first["id"])


def test_a_run_is_refused_with_the_chats_words(client, alice, alice_key, settings):
    settings.LOOP_TASK_MAX_CHARS = 10
    too_long = post(client, "/api/v1/runs", {"task": "x" * 11}, alice_key)
    empty = post(client, "/api/v1/runs", {"task": "  "}, alice_key)
    unknown_model = post(client, "/api/v1/runs", {"task": "hi", "model": "nope:nope"}, alice_key)
    missing = post(client, "/api/v1/runs", {}, alice_key)

    assert error_of(too_long) == (
        400,
        "invalid_task",
        "The task is 11 characters long; the limit is 10. Shorten it, or put the material in a "
        "file and ask the agent to read it.",
    )
    assert error_of(empty)[:2] == (400, "invalid_task")
    assert error_of(unknown_model)[:2] == (400, "model_not_offered")
    assert "does not offer the model 'nope:nope'" in error_of(unknown_model)[2]
    assert error_of(missing)[:2] == (422, "invalid_request")
    assert not AgentRun.objects.exists()


def test_one_run_more_than_the_person_may_have_is_refused(client, alice, alice_key, settings):
    settings.LOOP_USER_ACTIVE_RUNS = 1
    assert post(client, "/api/v1/runs", {"task": "one"}, alice_key).status_code == 201

    refused = post(client, "/api/v1/runs", {"task": "two"}, alice_key)

    status, code, message = error_of(refused)
    assert (status, code) == (429, "too_many_active_runs")
    assert message.startswith("You have 1 run going, the most Loop runs at once for one person.")
    assert AgentRun.objects.count() == 1


def test_another_persons_runs_and_conversations_are_not_there(client, alice, alice_key, bob):
    bobs = start_run(bob, "bob's", model="mock", conversation=new_conversation(bob, "bob's"))

    assert error_of(client.get(f"/api/v1/runs/{bobs.pk}", **bearer(alice_key)))[:2] == (
        404,
        "not_found",
    )
    for action in ("stop", "continue"):
        assert post(client, f"/api/v1/runs/{bobs.pk}/{action}", {}, alice_key).status_code == 404
    into_bobs = {"task": "mine", "conversation": bobs.conversation_id}
    assert error_of(post(client, "/api/v1/runs", into_bobs, alice_key))[:2] == (404, "not_found")
    assert client.get("/api/v1/runs", **bearer(alice_key)).json() == []
    assert client.get("/api/v1/conversations", **bearer(alice_key)).json() == []
    bobs.refresh_from_db()
    assert bobs.status == RunStatus.QUEUED
    assert bobs.cancel_requested_at is None
    assert Conversation.objects.get(pk=bobs.conversation_id).runs.count() == 1


def test_runs_and_conversations_list_newest_first_a_page_at_a_time(client, alice, alice_key):
    started = [
        post(client, "/api/v1/runs", {"task": f"t{n}"}, alice_key).json()["id"] for n in range(3)
    ]
    AgentRun.objects.update(status=RunStatus.SUCCEEDED)

    first = client.get("/api/v1/runs?limit=2", **bearer(alice_key)).json()
    rest = client.get(f"/api/v1/runs?limit=2&before={first[-1]['id']}", **bearer(alice_key)).json()
    conversations = client.get("/api/v1/conversations", **bearer(alice_key)).json()

    assert [run["id"] for run in first + rest] == started[::-1]
    assert [c["title"] for c in conversations] == ["t2", "t1", "t0"]
    assert {c["last_status"] for c in conversations} == {"succeeded"}
    assert client.get("/api/v1/runs?limit=0", **bearer(alice_key)).status_code == 422


def test_a_stop_through_the_api_stops_the_run(client, alice, alice_key):
    run = post(client, "/api/v1/runs", {"task": "long"}, alice_key).json()

    stopped = post(client, f"/api/v1/runs/{run['id']}/stop", {}, alice_key)

    assert stopped.status_code == 200
    assert stopped.json()["status"] == RunStatus.CANCELLED
    assert AgentRun.objects.get(pk=run["id"]).status == RunStatus.CANCELLED


def test_continue_is_refused_for_a_run_that_cannot_go_on(client, alice, alice_key):
    run = post(client, "/api/v1/runs", {"task": "t"}, alice_key).json()

    refused = post(client, f"/api/v1/runs/{run['id']}/continue", {}, alice_key)

    assert error_of(refused)[:2] == (409, "not_continuable")


def test_a_waiting_call_is_listed_and_approved_through_the_api(client, alice, alice_key):
    run = waiting_run(alice)
    shown = client.get(f"/api/v1/runs/{run.pk}", **bearer(alice_key)).json()
    [waiting] = shown["waiting"]
    assert (shown["status"], waiting["tool"]) == ("awaiting_approval", "run_code")

    decided = post(
        client,
        f"/api/v1/runs/{run.pk}/approvals/{waiting['call_id']}",
        {"decision": "approve", "digest": waiting["digest"]},
        alice_key,
    )

    assert decided.status_code == 200
    assert decided.json()["run"]["status"] == RunStatus.QUEUED
    request = ApprovalRequest.objects.get(run=run)
    assert (request.decision, request.decided_by, request.decided_via) == (
        "approve",
        alice,
        Via.API,
    )
    assert request.decided_key == f"{alice_key[:16]}… tests"
    again = post(
        client,
        f"/api/v1/runs/{run.pk}/approvals/{waiting['call_id']}",
        {"decision": "deny"},
        alice_key,
    )
    assert error_of(again)[:2] == (409, "decision_refused")


def test_a_decision_on_another_digest_or_anothers_run_changes_nothing(client, alice, bob):
    alices, bobs = waiting_run(alice), waiting_run(bob)
    secret = create_key(alice, "decides", ["decide"]).secret
    call_id = alices.approvals.get().call_id

    wrong_digest = post(
        client,
        f"/api/v1/runs/{alices.pk}/approvals/{call_id}",
        {"decision": "approve", "digest": "0" * 64},
        secret,
    )
    on_bobs = post(
        client,
        f"/api/v1/runs/{bobs.pk}/approvals/{bobs.approvals.get().call_id}",
        {"decision": "approve"},
        secret,
    )

    assert error_of(wrong_digest)[:2] == (409, "decision_refused")
    assert error_of(on_bobs)[:2] == (404, "not_found")
    assert set(ApprovalRequest.objects.values_list("decision", flat=True)) == {""}


def test_a_key_without_the_scope_is_refused_and_changes_nothing(client, alice):
    reader = create_key(alice, "reads", ["read"]).secret

    refused = post(client, "/api/v1/runs", {"task": "hi"}, reader)

    status, code, message = error_of(refused)
    assert (status, code) == (403, "scope_missing")
    assert "'run'" in message
    assert not AgentRun.objects.exists()
    assert client.get("/api/v1/runs", **bearer(reader)).status_code == 200


def test_a_body_over_the_sites_limit_is_refused_whole(client, alice, alice_key, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    refused = post(client, "/api/v1/runs", {"task": "x" * 2000}, alice_key)

    assert error_of(refused) == (
        413,
        "too_large",
        "The request's body is over 1,000 bytes, the most Loop takes; send less.",
    )
    assert not AgentRun.objects.exists()


def test_the_openapi_document_is_made_once_per_process(client):
    from api.main import api

    served = client.get("/api/v1/openapi.json").json()

    assert api.get_openapi_schema(path_prefix="/api/v1/") is api.get_openapi_schema(
        path_prefix="/api/v1/"
    )
    assert served["info"]["title"] == "Loop API"


def test_a_body_that_is_not_json_is_an_invalid_request(client, alice, alice_key):
    refused = client.post(
        "/api/v1/runs", '{"task": ', content_type="application/json", **bearer(alice_key)
    )

    status, code, message = error_of(refused)
    assert (status, code) == (400, "invalid_request")
    assert message.startswith("Cannot parse request body")
    assert not AgentRun.objects.exists()
