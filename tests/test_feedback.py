"""Thumbs up or down, and why, on a run's answer: kept once per run for its person only, shown
on the chat page as they left it, and read by operators on the run's console page and as a
filter of the runs list."""

import pytest

from agent.models import AgentRun, RunFeedback
from agent.runs import FEEDBACK_CHARS, InvalidTask, new_conversation, rate_run, submit_run
from core.events import RunStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def answered(user, task: str = "What is 17 * 23?") -> AgentRun:
    return execute_run(submit_run(user, task, new_conversation(user), model="mock"))


def test_a_person_rates_an_answer_and_changes_their_mind(alice):
    run = answered(alice)
    rate_run(alice, run.pk, "up")
    rate_run(alice, run.pk, "down", "  It should show the working.  ")
    [feedback] = RunFeedback.objects.all()
    assert (feedback.run_id, feedback.rating, feedback.comment) == (
        run.pk,
        "down",
        "It should show the working.",
    )


def test_only_a_finished_run_of_ones_own_is_rated_and_only_up_or_down(alice, bob):
    run = answered(alice)
    with pytest.raises(AgentRun.DoesNotExist):
        rate_run(bob, run.pk, "down")
    with pytest.raises(InvalidTask, match="up or down"):
        rate_run(alice, run.pk, "meh")
    with pytest.raises(InvalidTask, match="at most"):
        rate_run(alice, run.pk, "up", "x" * (FEEDBACK_CHARS + 1))
    going = submit_run(alice, "Count slowly to 3", new_conversation(alice), model="mock")
    with pytest.raises(InvalidTask, match="ended"):
        rate_run(alice, going.pk, "up")
    assert not RunFeedback.objects.exists()


def test_the_chat_page_offers_thumbs_on_an_ended_run_and_shows_the_choice(client, alice, bob):
    run = answered(alice)
    client.force_login(alice)
    page = client.get(f"/c/{run.conversation_id}/")
    assert f'id="run-{run.pk}-feedback"' in page.text
    assert 'class="thumb" aria-pressed="true"' not in page.text  # (the theme's choice is pressed)
    assert page.text.count('class="thumb" aria-pressed="false"') == 2

    thumbs = client.post(f"/runs/{run.pk}/feedback/", {"rating": "down"}, headers=HTMX)
    assert 'value="down" class="thumb" aria-pressed="true"' in thumbs.text
    assert f'id="run-{run.pk}-comment"' in thumbs.text  # now it asks why
    client.post(f"/runs/{run.pk}/feedback/", {"rating": "down", "comment": "Wrong sum"})
    page = client.get(f"/c/{run.conversation_id}/")
    assert 'value="Wrong sum"' in page.text

    client.force_login(bob)
    assert client.post(f"/runs/{run.pk}/feedback/", {"rating": "up"}).status_code == 404
    assert RunFeedback.objects.get().rating == "down"


def test_a_run_still_going_shows_no_thumbs(client, alice):
    going = submit_run(alice, "Count slowly to 3", new_conversation(alice), model="mock")
    client.force_login(alice)
    page = client.get(f"/c/{going.conversation_id}/")
    assert going.status == RunStatus.QUEUED
    assert f'action="/runs/{going.pk}/feedback/"' not in page.text


def test_operators_read_feedback_on_the_run_page_and_filter_runs_by_it(client, operator, alice):
    liked, disliked, unrated = (answered(alice, f"What is {n} * 3?") for n in (1, 2, 3))
    rate_run(alice, liked.pk, "up")
    rate_run(alice, disliked.pk, "down", "The answer missed the point")

    def listed(query: str) -> set[int]:
        page = client.get(f"/admin/agent/agentrun/?{query}")
        assert page.status_code == 200
        return {run.pk for run in page.context["cl"].result_list}

    assert listed("feedback=down") == {disliked.pk}
    assert listed("feedback=up") == {liked.pk}
    assert listed("feedback=none") == {unrated.pk}
    page = client.get(f"/admin/agent/agentrun/{disliked.pk}/change/")
    assert "The answer missed the point" in page.text
    assert "Bad answer" in page.text
