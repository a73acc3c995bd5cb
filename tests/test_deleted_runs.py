"""A deleted account's runs go on for no one: not its person, not an operator in the console, not
`runagent --resume` (issue 25, finding 6). They stay as they ended, the placeholder's."""

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from agent.models import AgentRun, RunResume
from agent.runs import (
    OwnerGone,
    continue_run,
    continue_run_as_operator,
    new_conversation,
    start_run,
)
from core.events import RunStatus
from core.loop import Limits
from engine.execution import execute_run
from memory.models import Memory
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
REFUSAL = "the account it acts for was deleted or deactivated"
RUNS = reverse("admin:agent_agentrun_changelist")


@pytest.fixture
def deleted_run(alice, as_alice, workspaces, django_capture_on_commit_callbacks) -> AgentRun:
    """Alice's demo halted at its cap (a run anyone could continue), then her account deleted
    from her own page."""
    run = start_run(
        alice, DEMO, model="mock", conversation=new_conversation(alice), limits=Limits(2)
    )
    run = execute_run(run)
    assert run.can_continue
    with django_capture_on_commit_callbacks(execute=True):
        deleted = as_alice.post("/accounts/data/delete/", {"password": PASSWORD})
    assert deleted.url == "/accounts/data/deleted/"
    run.refresh_from_db()
    assert run.user.username.startswith("deleted-")
    return run


def assert_as_it_ended(run: AgentRun, workspaces) -> None:
    """Still halted, no job, no resume; nothing made in the placeholder's name."""
    run.refresh_from_db()
    assert (run.status, run.job_id, run.continue_requested_by) == (RunStatus.HALTED, None, None)
    assert not RunResume.objects.filter(run=run).exists()
    assert not Memory.objects.filter(owner=run.user).exists()
    assert not (workspaces / str(run.user_id)).exists()


def test_an_operators_continue_is_refused_in_the_console(client, operator, deleted_run, workspaces):
    response = client.post(
        RUNS, {"action": "continue_runs", "_selected_action": [deleted_run.pk]}, follow=True
    )
    said = [str(message) for message in response.context["messages"]]
    assert len(said) == 1
    assert said[0].startswith(f"Run {deleted_run.pk} was not continued: ")
    assert REFUSAL in said[0]
    continued = client.post(
        reverse("admin:agent_agentrun_continue", args=[deleted_run.pk]), follow=True
    )
    assert REFUSAL in " ".join(str(message) for message in continued.context["messages"])
    page = client.get(reverse("admin:agent_agentrun_change", args=[deleted_run.pk]))
    assert 'id="continue-run"' not in page.content.decode()
    assert_as_it_ended(deleted_run, workspaces)


def test_runagent_resume_is_refused(deleted_run, workspaces):
    with pytest.raises(CommandError, match=REFUSAL) as refused:
        call_command("runagent", "--resume", str(deleted_run.pk), stdout=StringIO())
    assert refused.value.returncode == 2
    assert_as_it_ended(deleted_run, workspaces)


def test_the_persons_paths_are_refused(as_alice, deleted_run, workspaces):
    # The deleted person's browser: its session went with the account.
    response = as_alice.post(reverse("chat:continue", args=[deleted_run.pk]))
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")
    # Whoever acted as the placeholder (it cannot log in: it is inactive) is refused as well.
    with pytest.raises(OwnerGone):
        continue_run(deleted_run.user, deleted_run.pk)
    assert_as_it_ended(deleted_run, workspaces)


def test_a_deactivated_accounts_run_goes_on_once_it_is_active_again(alice, operator, workspaces):
    run = execute_run(start_run(alice, DEMO, model="mock", limits=Limits(2)))
    User.objects.filter(pk=alice.pk).update(is_active=False)
    with pytest.raises(OwnerGone, match=REFUSAL):
        continue_run_as_operator(operator, run.pk)
    User.objects.filter(pk=alice.pk).update(is_active=True)
    assert continue_run_as_operator(operator, run.pk).status == RunStatus.QUEUED
