"""Who reaches the console, and what nobody can do there: audit records are read-only."""

from dataclasses import dataclass

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db.models import Model
from django.shortcuts import resolve_url
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from agent.runs import start_run
from engine.execution import execute_run
from memory.forgetting import forget
from memory.models import ForgottenMemory, Memory

from .sandboxes import SANDBOX

pytestmark = pytest.mark.django_db

AUDIT_MODELS = (AgentRun, RunEvent, ToolExecution, BreakerTrip, ForgottenMemory)
READ_ONLY_MODELS = (*AUDIT_MODELS, Memory)


def admin_url(model, action: str, *args) -> str:
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{action}", args=args)


def make_records(alice: User, root: User) -> dict[type[Model], int]:
    """The id of one record of each model, from a run that tripped the breaker and a forgetting."""
    run = execute_run(start_run(alice, "Keep reading missing.txt until it exists", model="mock"))
    # Runs that write a file leave an outcome: one to forget, one to keep.
    told = execute_run(
        start_run(alice, "Say hello", model="mock"),
        llm=ScriptedLLM(
            [call("write_file", {"path": "hello.txt", "content": "Hello"}), answer("Hello.")]
        ),
    )
    forget(Memory.objects.filter(source_run_id=told.pk), root)
    saved = execute_run(start_run(alice, "Save 'buy milk' to notes.txt", model="mock"))
    SANDBOX.pool.drain()
    return {
        AgentRun: run.pk,
        RunEvent: run.events.first().pk,
        ToolExecution: run.tool_executions.first().pk,
        BreakerTrip: run.breaker_trips.get().pk,
        ForgottenMemory: ForgottenMemory.objects.get().pk,
        Memory: Memory.objects.get(source_run_id=saved.pk).pk,
    }


@dataclass(frozen=True)
class Made:
    alice: int
    root: int
    records: dict[type[Model], int]  # the id of one record of each model


@pytest.fixture(scope="module")
def made(module_records) -> Made:
    """A run that tripped the breaker, so every kind of audit record exists, and a forgetting:
    made once for the module (real runs, sandbox and all) and committed, then deleted with their
    users. A test that deletes a record does so in its own transaction, rolled back at its end."""

    def build() -> Made:
        alice = User.objects.create_user("alice")
        root = User.objects.create_superuser("root", "root@example.com", "a long password")
        return Made(alice.pk, root.pk, make_records(alice, root))

    return module_records.make(build)


@pytest.fixture
def alice(made) -> User:
    return User.objects.get(pk=made.alice)


@pytest.fixture
def records(made) -> dict[type[Model], Model]:
    """One record of each model, as fresh instances for this test."""
    return {model: model.objects.get(pk=pk) for model, pk in made.records.items()}


def every_console_url(records) -> list[str]:
    run = records[AgentRun]
    urls = [reverse("admin:index"), reverse("admin:agent_agentrun_usage")]
    urls += [reverse("admin:agent_agentrun_transcript", args=[run.pk])]
    for model, obj in records.items():
        urls += [admin_url(model, "changelist"), admin_url(model, "change", obj.pk)]
    return urls


def is_login_page(location: str) -> bool:
    """The site's login (anonymous visitors meet it first) or the admin's (logged-in non-staff)."""
    return location.startswith((resolve_url(settings.LOGIN_URL), reverse("admin:login")))


def test_people_who_are_not_staff_reach_nothing(client, records, alice):
    for who in (None, alice):
        if who is not None:
            client.force_login(who)
        for url in every_console_url(records):
            response = client.get(url)
            assert response.status_code == 302, url
            assert is_login_page(response["Location"]), url
        cancel = client.post(reverse("admin:agent_agentrun_cancel", args=[records[AgentRun].pk]))
        assert cancel.status_code == 302
        assert is_login_page(cancel["Location"])


def test_staff_without_permissions_see_no_records(client, records):
    client.force_login(User.objects.create_user("newstaff", is_staff=True))
    for url in every_console_url(records)[1:]:
        assert client.get(url).status_code == 403, url
    assert "Audit console" not in client.get(reverse("admin:index")).content.decode()


@pytest.fixture
def viewer(client):
    """Staff who may view every record, and were even granted add, change and delete on them."""
    user = User.objects.create_user("viewer", is_staff=True)
    codenames = [
        f"{action}_{model._meta.model_name}"
        for model in READ_ONLY_MODELS
        for action in ("view", "add", "change", "delete")
    ]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def test_staff_with_view_permissions_read_every_page(client, records, viewer):
    for url in every_console_url(records):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("model", READ_ONLY_MODELS, ids=lambda m: m.__name__)
def test_no_crafted_post_adds_or_changes_an_audit_record(client, records, viewer, model):
    obj = records[model]
    before = list(model.objects.order_by("pk").values())
    assert client.post(admin_url(model, "add"), {"step": 1, "tool": "x"}).status_code == 403
    change = admin_url(model, "change", obj.pk)
    crafted = {"status": "succeeded", "text": "rewritten", "kind": "run_finished", "step": 99}
    assert client.post(change, crafted).status_code == 403
    assert list(model.objects.order_by("pk").values()) == before


def test_even_a_superuser_cannot_add_or_change_audit_records(client, records):
    root = User.objects.get(username="root")
    client.force_login(root)
    run = records[AgentRun]
    assert client.post(admin_url(AgentRun, "add"), {"task": "x"}).status_code == 403
    response = client.post(admin_url(AgentRun, "change", run.pk), {"status": "succeeded"})
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == "halted"


@pytest.mark.parametrize("model", AUDIT_MODELS, ids=lambda m: m.__name__)
def test_only_a_superuser_deletes_audit_records(client, records, viewer, model):
    obj = records[model]
    delete = admin_url(model, "delete", obj.pk)
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()
    changelist = admin_url(model, "changelist")
    client.post(
        changelist, {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"}
    )
    assert model.objects.filter(pk=obj.pk).exists()
    client.force_login(User.objects.get(username="root"))
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not model.objects.filter(pk=obj.pk).exists()


def test_cancelling_needs_the_permission_to_change_runs(client, viewer, alice):
    run = start_run(alice, "List my files", model="mock")
    viewer.user_permissions.remove(Permission.objects.get(codename="change_agentrun"))
    page = client.get(admin_url(AgentRun, "change", run.pk)).content.decode()
    assert 'id="cancel-run"' not in page
    assert "cancel_runs" not in client.get(admin_url(AgentRun, "changelist")).content.decode()
    assert client.post(reverse("admin:agent_agentrun_cancel", args=[run.pk])).status_code == 403
    client.post(
        admin_url(AgentRun, "changelist"), {"action": "cancel_runs", "_selected_action": [run.pk]}
    )
    run.refresh_from_db()
    assert run.status == "queued"


def test_cancelling_is_by_post_only(client, viewer, alice):
    run = start_run(alice, "List my files", model="mock")
    assert client.get(reverse("admin:agent_agentrun_cancel", args=[run.pk])).status_code == 405
    run.refresh_from_db()
    assert run.status == "queued"


def test_the_transcript_of_a_run_that_does_not_exist_is_not_found(client, records):
    client.force_login(User.objects.get(username="root"))
    missing = records[AgentRun].pk + 1000
    url = reverse("admin:agent_agentrun_transcript", args=[missing])
    assert client.get(url).status_code == 404
