"""Continue: a run that stopped early (halted, interrupted, failed on a model outage) goes on from
its log, asked by its owner in the chat, by an operator in the console, or from the terminal. How
every reader draws where a run went on: tests/test_event_readers.py."""

from collections import Counter
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from chat.stream import read_unsent
from core.events import (
    EndCause,
    ResumeReason,
    RunStatus,
)
from core.llm import LLMError
from core.loop import Limits
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

DEMO = "Compute the sum of 1..100 and save it to a file"
DEMO_ANSWER = "The sum of 1..100 is 5050. I saved it to sum.txt."
RUNS = reverse("admin:agent_agentrun_changelist")
HTMX = {"HX-Request": "true"}


def halted_run(user: User) -> AgentRun:
    """The demo stopped at a cap of two model turns, in a conversation of `user`'s: it has
    computed the sum and looked for the file, and has yet to write it."""
    run = start_run(user, DEMO, model="mock", conversation=new_conversation(user), limits=Limits(2))
    run = execute_run(run)
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    return run


def succeeded_run(user: User) -> AgentRun:
    run = start_run(user, "What is 17 * 23?", model="mock", conversation=new_conversation(user))
    return execute_run(run)


def logged_in(user: User, **options: bool) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def continue_url(run: AgentRun) -> str:
    return reverse("chat:continue", args=[run.pk])


def executions_per_call(run: AgentRun) -> Counter[str]:
    return Counter(run.tool_executions.values_list("call_id", flat=True))


# The chat


def test_the_owner_continues_a_halted_run_and_the_page_follows_it(alice, workspaces):
    run = halted_run(alice)
    client = logged_in(alice)
    page = client.get(reverse("chat:conversation", args=[run.conversation_id])).text
    assert f'hx-post="{continue_url(run)}"' in page
    assert 'class="continue"' in page

    response = client.post(continue_url(run), headers=HTMX)
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    # The turn takes its own place again, and its marker has the page watch it live.
    assert f'<section class="turn" id="run-{run.pk}"' in response.text
    assert f'data-run="{run.pk}" data-seq="{run.events.count()}" data-watch' in response.text
    assert "Waiting for a worker" in response.text
    # Swapped in whole: no card in it may be an out-of-band swap, or htmx takes it out; only
    # the sidebar's icon is, which now says the conversation waits again.
    turn, icon = response.text.split("</section>")
    assert "hx-swap-oob" not in turn
    assert f'id="conversation-{run.conversation_id}-status" hx-swap-oob="true"' in icon
    assert "Waiting for a worker" in icon
    assert response.text.count('class="card tool') == 2
    assert 'class="continue"' not in response.text

    run = execute_run(run)  # what the worker that takes the job does
    assert run.status == RunStatus.SUCCEEDED
    page = client.get(reverse("chat:conversation", args=[run.conversation_id])).text
    assert "Continued: you asked it to go on" in page
    assert DEMO_ANSWER in page
    assert 'class="continue"' not in page  # it succeeded: nothing to continue
    assert set(executions_per_call(run).values()) == {1}


def test_a_run_the_model_provider_failed_is_continued_once_it_is_back(alice, workspaces):
    run = start_run(alice, "List my files", model="mock", conversation=new_conversation(alice))
    down = ScriptedLLM([call("list_files", {}), LLMError("Groq answered 503: overloaded")])
    run = execute_run(run, llm=down)
    assert (run.status, run.cause) == (RunStatus.FAILED, EndCause.MODEL_DOWN)
    client = logged_in(alice)
    page = client.get(reverse("chat:conversation", args=[run.conversation_id])).text
    assert "Continue it once the provider is back" in page
    assert f'hx-post="{continue_url(run)}"' in page

    client.post(continue_url(run), headers=HTMX)
    back = ScriptedLLM([answer("Your workspace is empty.")])
    run = execute_run(AgentRun.objects.get(pk=run.pk), llm=back)
    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "Your workspace is empty.")
    assert set(executions_per_call(run).values()) == {1}  # list_files ran once
    assert run.cause == ""  # it succeeded: the cause of the end before is gone


def test_what_may_continue_is_read_from_the_cause_never_from_the_error():
    worded = AgentRun(status=RunStatus.FAILED, error="Model failed: Groq answered 503")
    assert not worded.can_continue
    down = AgentRun(status=RunStatus.FAILED, error="Groq answered 503", cause=EndCause.MODEL_DOWN)
    assert down.can_continue
    assert not AgentRun(status=RunStatus.FAILED, cause=EndCause.INTERNAL_ERROR).can_continue


def test_without_htmx_a_continue_goes_back_to_the_conversation(alice, workspaces):
    run = halted_run(alice)
    response = logged_in(alice).post(continue_url(run))
    assert response.status_code == 302
    assert response.url == reverse("chat:conversation", args=[run.conversation_id])
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_another_users_run_is_404_and_stays_as_it_ended(alice, bob, workspaces):
    run = halted_run(alice)
    assert logged_in(bob).post(continue_url(run), headers=HTMX).status_code == 404
    assert logged_in(bob).post(reverse("chat:continue", args=[run.pk + 1000])).status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_a_continue_without_a_csrf_token_is_refused(alice, workspaces):
    run = halted_run(alice)
    assert logged_in(alice, enforce_csrf_checks=True).post(continue_url(run)).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_a_continue_is_only_posted(alice, workspaces):
    run = halted_run(alice)
    assert logged_in(alice).get(continue_url(run)).status_code == 405


def test_a_run_that_cannot_continue_is_refused_with_a_sentence(alice, workspaces):
    run = succeeded_run(alice)
    client = logged_in(alice)
    page = client.get(reverse("chat:conversation", args=[run.conversation_id])).text
    assert continue_url(run) not in page

    htmx = client.post(continue_url(run), headers=HTMX)
    assert htmx.headers["HX-Retarget"] == "#send-error"
    sentence = htmx.text
    assert sentence.strip().endswith(".")
    assert "<" not in sentence  # a sentence, not a page

    plain = client.post(continue_url(run))
    assert plain.status_code == 400
    assert f'role="alert">{sentence}</div>' in plain.text
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


def test_a_continue_over_the_active_runs_limit_says_so(alice, workspaces, settings):
    run = halted_run(alice)
    settings.LOOP_USER_ACTIVE_RUNS = 2
    for task in ("What is 1 + 1?", "What is 2 + 2?"):  # queued: they hold both slots
        start_run(alice, task, model="mock")
    htmx = logged_in(alice).post(continue_url(run), headers=HTMX)
    assert htmx.headers["HX-Retarget"] == "#send-error"
    assert "You have 2 runs going" in htmx.text
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_a_catch_up_across_the_old_end_keeps_the_page_watching(alice, workspaces):
    """The socket's catch-up of a continued run holds its first end and what came after: the page
    must not take that end for the run's, or it would stop watching on a reconnect."""
    run = halted_run(alice)
    logged_in(alice).post(continue_url(run), headers=HTMX)
    read = read_unsent_now(alice, run.pk)
    assert "data-watch" in read.frames[-1]  # queued again: not finished
    run = execute_run(run)
    read = read_unsent_now(alice, run.pk)
    assert "Continued: you asked it to go on" in "".join(read.frames)
    assert "data-watch" not in read.frames[-1]  # now it has ended
    assert read.resumed


def test_a_turn_drawn_from_a_row_read_before_the_end_gets_continue_from_the_socket(
    alice, workspaces
):
    """The conversation's view reads the run's row, then its events: a run that ended between
    the two is drawn with its end's card but as working (no Continue, no Edit). The page watches
    it after its last event; the socket, finding nothing new and the run ended, redraws its
    status and actions (seen in CI: a halted run's Continue never came)."""
    run = halted_run(alice)
    last = run.events.order_by("-seq").values_list("seq", flat=True).first()
    [frame] = read_unsent.func(alice, run.pk, last).frames
    assert "data-watch" not in frame  # the page stops watching: it has ended
    assert 'class="continue"' in frame
    assert "Send the edited task" in frame
    assert "Regenerate" in frame
    queued = start_run(alice, "What is 17 * 23?", model="mock")
    [frame] = read_unsent.func(alice, queued.pk, 0).frames
    assert "data-watch" in frame
    assert "Send the edited task" not in frame  # a live run's status is the events' to redraw


def read_unsent_now(user: User, run_id: int):
    # read_unsent is the consumer's database read, wrapped for its event loop.
    return read_unsent.func(user, run_id, 0)


# The console


def test_an_operator_continues_the_selected_runs_with_a_message_for_each(
    client, operator, alice, workspaces
):
    halted, done = halted_run(alice), succeeded_run(alice)
    response = client.post(
        RUNS,
        {"action": "continue_runs", "_selected_action": [halted.pk, done.pk]},
        follow=True,
    )
    said = [str(message) for message in response.context["messages"]]
    assert f"Run {halted.pk} continues: it is queued again." in said
    refused = [text for text in said if text.startswith(f"Run {done.pk} was not continued: ")]
    assert len(refused) == 1, said
    halted.refresh_from_db()
    done.refresh_from_db()
    assert (halted.status, done.status) == (RunStatus.QUEUED, RunStatus.SUCCEEDED)
    entry = LogEntry.objects.get(object_id=str(halted.pk))
    assert (entry.user, entry.change_message) == (operator, "Continued by an operator.")


def test_staff_without_the_permission_cannot_continue_a_run(alice, workspaces):
    run = halted_run(alice)
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_agentrun"))
    client = logged_in(viewer)
    changelist = client.get(RUNS).content.decode()
    assert "continue_runs" not in changelist
    client.post(RUNS, {"action": "continue_runs", "_selected_action": [run.pk]})
    page = client.get(reverse("admin:agent_agentrun_change", args=[run.pk])).content.decode()
    assert 'id="continue-run"' not in page
    url = reverse("admin:agent_agentrun_continue", args=[run.pk])
    assert client.post(url).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.HALTED


def test_the_run_page_shows_the_engine_and_each_time_the_run_went_on(
    client, operator, alice, workspaces
):
    run = halted_run(alice)
    page = reverse("admin:agent_agentrun_change", args=[run.pk])
    before = client.get(page).content.decode()
    assert 'id="continue-run"' in before
    assert "never: one attempt" in before
    assert "heartbeat" not in before.lower()

    response = client.post(reverse("admin:agent_agentrun_continue", args=[run.pk]), follow=True)
    assert f"Run {run.pk} continues" in response.content.decode()
    run = execute_run(AgentRun.objects.get(pk=run.pk))
    assert run.status == RunStatus.SUCCEEDED
    after = client.get(page).content.decode()
    [resume] = run.resumes_log.all()
    assert resume.reason == ResumeReason.CONTINUED
    assert f"<td>{resume.attempt}</td><td>Continued: an operator asked" in after
    assert "↻ Continued: an operator asked it to go on" in after  # the timeline
    assert 'id="continue-run"' not in after
    for field in ("attempt", "worker", "resumes"):
        assert f"field-{field}" in after, field


# The terminal


@pytest.mark.django_db(transaction=True)
def test_runagent_resume_continues_a_halted_run_end_to_end(manage, worker_env):
    env = worker_env | {"LOOP_MAX_ITERATIONS": "2"}
    halted = manage("runagent", DEMO, env=env)
    assert halted.returncode == 3, halted.stderr
    run = AgentRun.objects.get()
    assert (run.status, run.halt_reason) == (RunStatus.HALTED, "iteration_cap")
    ran_before = executions_per_call(run)

    resumed = manage("runagent", "--resume", str(run.pk), env=env)
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert lines[0] == f"Continuing run {run.pk} (halted): {DEMO}"
    assert lines[1].startswith("Continued: you asked it to go on (attempt ")
    assert not any(line.startswith("Task: ") for line in lines)  # it goes on; it starts nothing
    assert DEMO_ANSWER in lines
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    # No tool call ran again: each ran once, the ones from before the halt among them.
    after = executions_per_call(run)
    assert set(after.values()) == {1}
    assert set(ran_before) < set(after)
    finished = run.events.filter(kind="tool_call_finished").values_list("data__call_id", flat=True)
    assert Counter(finished) == after


def test_runagent_resume_refuses_what_it_cannot_continue(alice, workspaces):
    done = succeeded_run(alice)
    for args, message in (
        (["--resume", "999999"], "No run 999999."),
        (["--resume", str(done.pk)], f"Run {done.pk} cannot continue: it is succeeded."),
        (["again", "--resume", str(done.pk)], "--resume continues a run as it was"),
        (["--resume", str(done.pk), "--max-iterations=3"], "leave out --max_iterations"),
        ([], "Say what the agent should do, or give --resume RUN_ID."),
    ):
        with pytest.raises(CommandError, match=message.replace(".", r"\.")) as raised:
            call_command("runagent", *args, stdout=StringIO())
        assert raised.value.returncode == 2, args
    done.refresh_from_db()
    assert done.status == RunStatus.SUCCEEDED
    assert AgentRun.objects.count() == 1
