"""The API's attack sweep: every operation of the published OpenAPI document (read here, so a new
operation is swept as soon as it is published) refuses whoever is not a working key with its
scope, and another person's key finds nothing of alice's and changes nothing; a session cookie
authenticates nothing, so no forged browser request acts; the request rates hold per key and per
person."""

import json
import re
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation, start_run
from api.keys import create_key, revoke
from api.models import ALL_SCOPES, ApiKey
from approvals.models import ApprovalRequest
from memory import personal
from memory.models import Memory
from tools.context import context_for

pytestmark = pytest.mark.django_db

API = "/api/v1"
SECRET_TASK = "Plan alice's surprise party"
SECRET_MEMORY = "Alice's locker code is 4711."
SECRET_FILE = b"alice's diary"
CALL_ID = "call-alice-1"
FROZEN = 1_800_000_030.0  # half a minute into a minute: the rates' windows do not turn mid-test

# The scope each operation needs, as the issue sets them (a new operation fails
# test_every_operation_has_its_scope_here until it is given one).
SCOPES = {
    ("post", "/api/v1/runs"): "run",
    ("get", "/api/v1/runs"): "read",
    ("get", "/api/v1/runs/{run_id}"): "read",
    ("post", "/api/v1/runs/{run_id}/stop"): "run",
    ("post", "/api/v1/runs/{run_id}/continue"): "run",
    ("post", "/api/v1/runs/{run_id}/approvals/{call_id}"): "decide",
    ("get", "/api/v1/conversations"): "read",
    ("get", "/api/v1/runs/{run_id}/events"): "read",
    ("get", "/api/v1/runs/{run_id}/agui"): "read",
    ("get", "/api/v1/files"): "files",
    ("post", "/api/v1/files"): "files",
    ("get", "/api/v1/files/{path}"): "files",
    ("delete", "/api/v1/files/{path}"): "files",
    ("get", "/api/v1/memories"): "read",
    ("post", "/api/v1/memories"): "run",
    ("delete", "/api/v1/memories/{memory_id}"): "run",
    ("get", "/api/v1/tools"): "read",
    ("get", "/api/v1/models"): "read",
    ("get", "/api/v1/quota"): "read",
    ("get", "/api/v1/assistants"): "read",
    ("post", "/api/v1/agui"): "run",
}
# The operations whose body names one of alice's things (a conversation), as their path would.
NAMED_IN_THE_BODY = {("post", f"{API}/runs"), ("post", f"{API}/agui")}
METHODS = {"get", "post", "put", "patch", "delete"}
PARAM = re.compile(r"\{(\w+)\}")


@pytest.fixture(autouse=True)
def frozen_rates(monkeypatch):
    """Each test counts its own requests, within one minute of the rates' clock."""
    monkeypatch.setattr("api.auth.time", types.SimpleNamespace(time=lambda: FROZEN))
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def things(alice, workspaces) -> dict[str, Any]:
    """Alice's run (waiting on a call), conversation, memory and file: what every path
    parameter names."""
    conversation = new_conversation(alice, "Alice's plans")
    run = start_run(alice, SECRET_TASK, model="mock", conversation=conversation)
    ApprovalRequest.objects.create(
        run=run, seq=1, step=1, call_id=CALL_ID, tool="run_code", arguments="{}", digest="d"
    )
    memory = personal.add_by_hand(alice, SECRET_MEMORY).memory
    (context_for(alice).workspace / "diary.txt").write_bytes(SECRET_FILE)
    return {
        "run_id": run.pk,
        "call_id": CALL_ID,
        "path": "diary.txt",
        "memory_id": memory.pk,
        "conversation": conversation.pk,
    }


def operations() -> list[tuple[str, str]]:
    document = Client().get(f"{API}/openapi.json").json()
    return [
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in METHODS
    ]


def url_of(path: str, things: dict[str, Any]) -> str:
    return PARAM.sub(lambda match: str(things[match.group(1)]), path)


def body_of(method: str, path: str, things: dict[str, Any]) -> dict[str, Any]:
    """A valid body for the operation, naming alice's things where it names any."""
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("post", f"{API}/runs"): {
            "task": "Read alice's plans",
            "conversation": things["conversation"],
        },
        ("post", f"{API}/runs/{{run_id}}/approvals/{{call_id}}"): {"decision": "approve"},
        ("post", f"{API}/memories"): {"text": "Bob likes tea."},
        ("post", f"{API}/agui"): {
            "threadId": str(things["conversation"]),
            "runId": "bobs-run",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "Read alice's plans"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        },
    }
    return bodies.get((method, path), {})


def call(client: Client, method: str, path: str, things: dict[str, Any], **headers: str):
    url = url_of(path, things)
    if (method, path) == ("post", f"{API}/files"):
        upload = SimpleUploadedFile("upload.txt", b"uploaded")
        return client.post(url, {"file": upload}, headers=headers)
    body = body_of(method, path, things)
    if method == "get":
        return client.get(url, headers=headers)
    return client.generic(
        method.upper(),
        url,
        data=json.dumps(body) if body else "",
        content_type="application/json",
        headers=headers,
    )


def state_of(user: User) -> tuple[object, ...]:
    """What any operation could change of the user's."""
    workspace = context_for(user).workspace
    return (
        list(AgentRun.objects.filter(user=user).order_by("pk").values_list("pk", "status", "task")),
        list(
            Conversation.objects.filter(owner=user)
            .order_by("pk")
            .values_list("pk", "title", "archived_at", "deleted_at")
        ),
        list(
            ApprovalRequest.objects.filter(run__user=user)
            .order_by("pk")
            .values_list("pk", "decision", "decided_at")
        ),
        list(Memory.objects.filter(owner=user).order_by("pk").values_list("pk", "text")),
        files_in(workspace),
        list(ApiKey.objects.filter(owner=user).order_by("pk").values_list("prefix", "revoked_at")),
    )


def files_in(workspace: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(path.relative_to(workspace)), path.read_bytes() if path.is_file() else b"")
        for path in workspace.rglob("*")
    )


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status, (status, response)
    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert response.json()["error"]["code"] == code


def test_every_operation_has_its_scope_here():
    assert set(operations()) == set(SCOPES), "a new operation: give it its scope in SCOPES"


def test_the_document_says_which_scope_each_operation_takes():
    document = Client().get(f"{API}/openapi.json").json()
    said = {
        (method, path): [name for need in operation["security"] for name in need]
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert said == {operation: [f"{scope.title()}Key"] for operation, scope in SCOPES.items()}
    schemes = document["components"]["securitySchemes"]
    assert schemes["FilesKey"]["description"].startswith("A personal API key with the 'files'")


def unworking_keys(alice: User) -> dict[str, str]:
    """Keys that must not work, by why."""
    full = create_key(alice, "real", ALL_SCOPES).secret
    revoked = create_key(alice, "revoked", ALL_SCOPES)
    revoke(ApiKey.objects.filter(owner=alice), revoked.key.prefix)
    expired = create_key(alice, "expired", ALL_SCOPES, timezone.now() + timedelta(days=1))
    ApiKey.objects.filter(pk=expired.key.pk).update(expires_at=timezone.now())
    carol = User.objects.create_user("carol", password="a long password")
    deactivated = create_key(carol, "gone", ALL_SCOPES).secret
    User.objects.filter(pk=carol.pk).update(is_active=False)
    prefix = full[: full.rindex("_")]
    return {
        "malformed": "not-a-key",
        "no secret": prefix,
        "wrong secret": f"{prefix}_{'A' * 43}",
        "revoked": revoked.secret,
        "expired": expired.secret,
        "deactivated owner": deactivated,
    }


def test_every_operation_refuses_a_request_without_a_working_key(alice, things):
    keys = unworking_keys(alice)
    before = state_of(alice)
    for method, path in operations():
        refusals = [("no key", call(Client(), method, path, things))]
        refusals += [
            (why, call(Client(), method, path, things, Authorization=f"Bearer {secret}"))
            for why, secret in keys.items()
        ]
        refusals.append(
            ("basic", call(Client(), method, path, things, Authorization="Basic YWxpY2U6eA=="))
        )
        for why, response in refusals:
            assert response.status_code == 401, (method, path, why, response.content)
            assert_error(response, 401, "unauthorized")
            assert response["WWW-Authenticate"] == 'Bearer realm="loop"'
    assert state_of(alice) == before


def test_every_operation_refuses_a_key_without_its_scope(alice, things):
    lacking = {
        needed: create_key(alice, f"no {needed}", [s for s in ALL_SCOPES if s != needed]).secret
        for needed in ALL_SCOPES
    }
    before = state_of(alice)
    for method, path in operations():
        needed = SCOPES[(method, path)]
        response = call(Client(), method, path, things, Authorization=f"Bearer {lacking[needed]}")
        assert_error(response, 403, "scope_missing")
        assert repr(needed) in response.json()["error"]["message"]
    assert state_of(alice) == before


def test_another_persons_key_finds_nothing_of_alices_and_changes_nothing(
    alice, bob, things, settings, async_views_keep_the_tests_connection
):
    settings.LOOP_MODEL = "mock"
    before = state_of(alice)
    bobs = create_key(bob, "bob's", ALL_SCOPES).secret
    for method, path in operations():
        response = call(Client(), method, path, things, Authorization=f"Bearer {bobs}")
        names_alices = "{" in path or (method, path) in NAMED_IN_THE_BODY
        if names_alices:
            assert_error(response, 404, "not_found")
        else:
            assert response.status_code < 300, (method, path, response.content)
        content = b"".join(response.streaming_content) if response.streaming else response.content
        for secret in (SECRET_TASK, SECRET_MEMORY, "Alice's plans", "alice"):
            assert secret.encode() not in content, (method, path, content)
        assert SECRET_FILE not in content
    assert state_of(alice) == before


def test_a_session_cookie_alone_authenticates_nothing(alice, things):
    before = state_of(alice)
    logged_in = Client(enforce_csrf_checks=True)
    logged_in.force_login(alice)
    for method, path in operations():
        response = call(logged_in, method, path, things)
        assert_error(response, 401, "unauthorized")
    # Not even with the pages' CSRF token, which a page of this site would send.
    logged_in.get("/memories/")
    token = logged_in.cookies["csrftoken"].value
    for method, path in operations():
        if method != "get":
            response = call(logged_in, method, path, things, X_CSRFToken=token)
            assert_error(response, 401, "unauthorized")
    assert state_of(alice) == before


def test_a_key_past_its_rate_is_refused_until_the_minute_ends(alice, alice_key, settings):
    settings.LOOP_API_KEY_REQUESTS_PER_MINUTE = 2
    bearer = {"Authorization": f"Bearer {alice_key}"}
    for _ in range(2):
        assert Client().get(f"{API}/tools", headers=bearer).status_code == 200
    refused = Client().post(
        f"{API}/memories", {"text": "Too fast."}, content_type="application/json", headers=bearer
    )
    assert_error(refused, 429, "rate_limited")
    assert refused["Retry-After"] == "30"
    assert not Memory.objects.filter(owner=alice).exists()
    other = create_key(alice, "another", ALL_SCOPES).secret  # the limit is per key
    assert (
        Client().get(f"{API}/tools", headers={"Authorization": f"Bearer {other}"}).status_code
        == 200
    )


def test_a_persons_rate_counts_all_of_their_keys(alice, bob, alice_key, settings):
    settings.LOOP_API_PERSON_REQUESTS_PER_MINUTE = 3
    second = create_key(alice, "second", ALL_SCOPES).secret
    first, other = (
        Client(headers={"Authorization": f"Bearer {alice_key}"}),
        Client(headers={"Authorization": f"Bearer {second}"}),
    )
    assert first.get(f"{API}/models").status_code == 200
    assert first.get(f"{API}/models").status_code == 200
    assert other.get(f"{API}/models").status_code == 200
    refused = other.get(f"{API}/models")
    assert_error(refused, 429, "rate_limited")
    assert refused["Retry-After"] == "30"
    assert_error(first.get(f"{API}/models"), 429, "rate_limited")
    bobs = create_key(bob, "bob's", ALL_SCOPES).secret  # the limit is per person
    assert (
        Client().get(f"{API}/models", headers={"Authorization": f"Bearer {bobs}"}).status_code
        == 200
    )
