"""Deleting one's own account: a password check first; then live runs stop, memories,
conversations and the workspace go, and the runs stay for the operators' audit, anonymised."""

import pytest
from axes.models import AccessAttempt, AccessLog
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.test import Client

from accounts import my_data
from accounts.models import WAITING_FOR_APPROVAL, SignUp
from agent.models import AgentRun, Conversation, RunEvent
from agent.runs import new_conversation, start_run
from core.events import RunFinished, RunStatus
from engine.execution import execute_run
from memory.forgetting import forget
from memory.models import ForgottenMemory, Memory
from memory.store import remember
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

DEMO = "Compute the sum of 1..100 and save it to a file"
DELETE = "/accounts/data/delete/"
LOGIN = "/accounts/login/"
TOLD = "Alice's favourite colour is teal."


@pytest.fixture
def alices_data(alice, bob, workspaces) -> dict:
    """A finished run that wrote a file and remembered it, a memory told by hand, one she
    forgot herself, a run still queued in another conversation; bob's own run, memory and
    file, and a link to his workspace from hers."""
    conversation = new_conversation(alice)
    done = execute_run(start_run(alice, DEMO, model="mock", conversation=conversation))
    remember(alice, TOLD)
    remember(alice, "Alice once lived in Lisbon.")
    forget(Memory.objects.filter(owner=alice, text__contains="Lisbon"), by=alice)
    queued = start_run(
        alice, "What is 17 * 23?", model="mock", conversation=new_conversation(alice)
    )
    bobs_run = start_run(bob, "What is 2 + 2?", model="mock", conversation=new_conversation(bob))
    remember(bob, "Bob likes tea.")
    (workspaces / str(bob.pk)).mkdir()
    (workspaces / str(bob.pk) / "tea.txt").write_text("Assam\n")
    (workspaces / str(alice.pk) / "bobs").symlink_to(workspaces / str(bob.pk))
    return {"done": done, "queued": queued, "bobs_run": bobs_run}


def held(user: User, workspaces) -> dict:
    """Everything of the person's, to compare before and after a refused deletion."""
    runs = AgentRun.objects.filter(user=user)
    return {
        "user": User.objects.filter(pk=user.pk, is_active=True).exists(),
        "memories": sorted(Memory.objects.filter(owner=user).values_list("text", flat=True)),
        "conversations": sorted(Conversation.objects.filter(owner=user).values_list("pk")),
        "runs": sorted(runs.values_list("pk", "status", "conversation", "cancel_requested_at")),
        "files": sorted(p.name for p in (workspaces / str(user.pk)).iterdir()),
        "forgotten": list(ForgottenMemory.objects.filter(owner=user).values()),
    }


def delete(client: Client, password: str = PASSWORD, capture=None):
    if capture is None:
        return client.post(DELETE, {"password": password})
    with capture(execute=True):
        return client.post(DELETE, {"password": password})


def test_a_wrong_password_changes_nothing(as_alice, alice, alices_data, workspaces):
    before = held(alice, workspaces)
    response = delete(as_alice, "not my password")
    assert response.status_code == 200
    assert "That is not your password. Nothing was deleted." in response.text
    assert held(alice, workspaces) == before
    assert as_alice.get("/accounts/data/").status_code == 200  # still logged in


def test_no_password_changes_nothing(as_alice, alice, alices_data, workspaces):
    before = held(alice, workspaces)
    assert delete(as_alice, "").status_code == 200
    assert held(alice, workspaces) == before


def test_the_right_password_deletes_what_is_hers_and_keeps_her_runs_anonymised(
    as_alice, alice, alices_data, workspaces, django_capture_on_commit_callbacks
):
    run_ids = set(AgentRun.objects.filter(user=alice).values_list("pk", flat=True))
    conversation_ids = set(Conversation.objects.filter(owner=alice).values_list("pk", flat=True))
    memory_ids = set(Memory.objects.filter(owner=alice).values_list("pk", flat=True))
    response = delete(as_alice, capture=django_capture_on_commit_callbacks)
    assert response.status_code == 302
    assert response.url == "/accounts/data/deleted/"
    assert not User.objects.filter(username="alice").exists()
    assert not Memory.objects.filter(pk__in=memory_ids).exists()
    assert not Conversation.objects.filter(pk__in=conversation_ids).exists()
    assert not (workspaces / str(alice.pk)).exists()
    runs = AgentRun.objects.filter(pk__in=run_ids)
    assert runs.count() == len(run_ids)
    placeholder = User.objects.get(pk__in=runs.values("user"))
    assert placeholder.username.startswith("deleted-")
    assert placeholder.username != "alice"
    assert not placeholder.is_active
    assert not placeholder.has_usable_password()
    assert set(runs.values_list("conversation", flat=True)) == {None}
    assert RunEvent.objects.filter(run__in=runs).count() > 0  # the logs stay with the runs


def test_a_live_run_is_cancelled_before_anything_is_deleted(
    as_alice, alice, alices_data, monkeypatch, django_capture_on_commit_callbacks
):
    running = start_run(alice, "What is 6 * 7?", model="mock")
    AgentRun.objects.filter(pk=running.pk).update(status=RunStatus.RUNNING)
    seen = []
    cancel = my_data.request_cancel

    def watched(run: AgentRun) -> AgentRun:
        seen.append((run.pk, Memory.objects.filter(owner=alice).count()))
        return cancel(run)

    monkeypatch.setattr(my_data, "request_cancel", watched)
    still_there = Memory.objects.filter(owner=alice).count()
    assert still_there > 0
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    queued = alices_data["queued"]
    assert sorted(seen) == sorted([(queued.pk, still_there), (running.pk, still_there)])
    queued.refresh_from_db()
    assert queued.status == RunStatus.CANCELLED
    assert isinstance(queued.events.order_by("seq").last().event, RunFinished)
    running.refresh_from_db()
    assert running.cancel_requested_at is not None
    assert running.user.username.startswith("deleted-")


def test_the_person_is_logged_out_sees_it_is_done_and_cannot_log_in_again(
    as_alice, alices_data, django_capture_on_commit_callbacks
):
    response = delete(as_alice, capture=django_capture_on_commit_callbacks)
    done = as_alice.get(response.url)
    assert done.status_code == 200
    assert "Your account is deleted" in done.text
    page = as_alice.get("/accounts/data/")
    assert page.status_code == 302
    assert page.url.startswith("/accounts/login/")
    login = Client().post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert login.status_code == 200
    assert "_auth_user_id" not in login.wsgi_request.session


def test_forgetting_records_keep_no_text_and_name_only_the_placeholder(
    as_alice, alice, alices_data, settings, django_capture_on_commit_callbacks
):
    settings.LOOP_FORGOTTEN_TEXT_DAYS = 30  # even a retention that keeps texts keeps none here
    memory_ids = set(Memory.objects.filter(owner=alice).values_list("pk", flat=True))
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    records = ForgottenMemory.objects.filter(owner_name__startswith="deleted-")
    assert memory_ids <= set(records.values_list("memory_id", flat=True))
    assert records.count() == len(memory_ids) + 1  # and the one she forgot herself before
    assert set(records.values_list("text", flat=True)) == {""}
    assert not ForgottenMemory.objects.filter(owner_name="alice").exists()
    assert not ForgottenMemory.objects.filter(forgotten_by_name="alice").exists()
    placeholder = records.first().owner
    assert set(records.values_list("forgotten_by", flat=True)) == {placeholder.pk}


def test_another_person_s_data_is_untouched(
    as_alice, bob, alices_data, workspaces, django_capture_on_commit_callbacks
):
    before = held(bob, workspaces)
    assert before["memories"]
    assert before["runs"]
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    assert held(bob, workspaces) == before


def test_each_deleted_account_gets_a_placeholder_of_its_own_never_a_waiting_sign_up(
    as_alice, bob, alices_data, django_capture_on_commit_callbacks
):
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    as_bob = Client()
    as_bob.force_login(bob)
    delete(as_bob, capture=django_capture_on_commit_callbacks)
    placeholders = User.objects.filter(username__startswith="deleted-")
    assert placeholders.count() == 2
    assert not User.objects.filter(WAITING_FOR_APPROVAL, pk__in=placeholders).exists()


def test_the_operators_log_about_the_account_names_the_placeholder(
    as_alice, alice, alices_data, django_capture_on_commit_callbacks
):
    operator = User.objects.create_superuser("root", "root@example.com", PASSWORD)
    approved = LogEntry.objects.log_actions(
        operator.pk,
        [SignUp.objects.get(pk=alice.pk)],
        CHANGE,
        change_message="Approved.",
        single_object=True,
    )
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    approved.refresh_from_db()
    placeholder = User.objects.get(username__startswith="deleted-")
    assert (approved.object_id, approved.object_repr) == (str(placeholder.pk), placeholder.username)
    assert approved.content_type == ContentType.objects.get_for_model(SignUp, False)


def test_the_console_still_shows_the_runs_without_the_person(
    client, operator, as_alice, alices_data, django_capture_on_commit_callbacks
):
    delete(as_alice, capture=django_capture_on_commit_callbacks)
    page = client.get(f"/admin/agent/agentrun/{alices_data['done'].pk}/change/")
    assert page.status_code == 200
    placeholder = User.objects.get(username__startswith="deleted-")
    assert placeholder.username in page.text
    assert ">alice<" not in page.text


def test_the_records_of_her_logins_stay_under_the_placeholder_s_name(
    alice, alices_data, django_capture_on_commit_callbacks
):
    client = Client()
    assert client.post(LOGIN, {"username": "alice", "password": "wrong"}).status_code == 200
    assert client.post(LOGIN, {"username": "alice", "password": PASSWORD}).status_code == 302
    logins = AccessLog.objects.filter(username="alice").count()
    attempts = AccessAttempt.objects.filter(username="alice").count()
    assert (logins, attempts) != (0, 0)
    delete(client, capture=django_capture_on_commit_callbacks)
    placeholder = User.objects.get(username__startswith="deleted-").username
    assert not AccessLog.objects.filter(username="alice").exists()
    assert not AccessAttempt.objects.filter(username="alice").exists()
    assert AccessLog.objects.filter(username=placeholder).count() == logins
    assert AccessAttempt.objects.filter(username=placeholder).count() == attempts


def test_an_operator_account_is_not_deleted_from_here(client, operator, workspaces):
    response = client.post(DELETE, {"password": "a long password"})
    assert "An operator&#x27;s account is not deleted from here" in response.text
    assert User.objects.filter(pk=operator.pk, is_active=True).exists()


def test_deleting_needs_a_post_with_a_csrf_token(alice, alices_data, workspaces):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(DELETE, {"password": PASSWORD}).status_code == 403
    assert User.objects.filter(pk=alice.pk).exists()
    assert client.get(DELETE).status_code == 405
    client.get("/accounts/data/")
    token = client.cookies["csrftoken"].value
    accepted = client.post(DELETE, {"password": PASSWORD, "csrfmiddlewaretoken": token})
    assert accepted.status_code == 302
    assert not User.objects.filter(pk=alice.pk).exists()


def test_deleting_needs_a_login(alice, alices_data):
    response = Client().post(DELETE, {"password": PASSWORD})
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")
    assert User.objects.filter(pk=alice.pk).exists()


def test_the_function_refuses_a_wrong_password_itself(alice, alices_data, workspaces):
    before = held(alice, workspaces)
    with pytest.raises(my_data.WrongPassword):
        my_data.delete_account(alice, "not my password")
    assert held(alice, workspaces) == before


def test_wrong_passwords_count_as_failed_logins_and_lock_out(
    as_alice, alice, alices_data, workspaces, settings
):
    """A stolen session cannot guess the password here for ever: each wrong one is a failed
    login with django-axes, and once locked out the right one is refused too."""
    for _ in range(settings.AXES_FAILURE_LIMIT):
        delete(as_alice, "a guess")
    assert AccessAttempt.objects.get(username="alice").failures_since_start >= 1
    delete(as_alice)
    assert User.objects.filter(pk=alice.pk, is_active=True).exists()
