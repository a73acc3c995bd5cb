"""The composer while a run goes, in Chromium against a live daphne and a real worker: its
button stops the run, a task typed meanwhile waits its turn and starts by itself when the run
ends, and one sent now reaches the running task, which shows where it read it."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from agent.models import AgentRun
from tests.conftest import wait_for
from tests.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    last_turn,
    live_site,
    logged_in,
    send,
)

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "textarea[name=task]"


def test_a_task_typed_during_a_run_waits_and_one_sent_now_reaches_the_run(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)
    page.fill(TASK, "Count slowly to 8")
    page.press(TASK, "Enter")
    expect(last_turn(page).locator(".card.tool.status-ok")).not_to_have_count(0, timeout=WAIT_MS)
    running = page.locator("#" + last_turn(page).get_attribute("id"))

    button = page.locator("#task-form button.primary")
    expect(button).to_have_text("Stop")
    expect(page.locator("#composer-note")).to_be_visible()
    page.fill(TASK, "What is 17 * 23?")
    expect(button).to_have_text("Queue")
    page.press(TASK, "Enter")
    queue = page.locator("#queue .queued")
    expect(queue).to_have_count(1)
    expect(queue).to_contain_text("What is 17 * 23?")
    page.fill(TASK, "Please keep counting")
    page.press(TASK, "Enter")
    expect(queue).to_have_count(2)
    page.screenshot(path=ARTIFACTS / "chat-queue.png")

    queue.filter(has_text="Please keep counting").get_by_role("button", name="Send now").click()
    expect(running.locator(".card.said")).to_contain_text("Please keep counting", timeout=WAIT_MS)
    expect(page.locator(".turn")).to_have_count(1)  # the queued one still waits

    expect(running.locator(".card.answer")).to_contain_text("I counted to 8", timeout=WAIT_MS)
    expect(page.locator(".turn")).to_have_count(2, timeout=WAIT_MS)  # it started by itself
    expect(last_turn(page).locator(".you .task")).to_have_text("What is 17 * 23?")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    expect(queue).to_have_count(0)
    expect(button).to_have_text("Send")
    heard = db(lambda: AgentRun.objects.get(task="Count slowly to 8").events.filter(
        kind="person_said").count())  # fmt: skip
    assert heard == 1

    # The answer that arrived live is rated, and the person says why.
    rated = last_turn(page).locator(".feedback")
    rated.get_by_role("button", name="Good answer").click()
    expect(rated.get_by_role("button", name="Good answer")).to_have_attribute(
        "aria-pressed", "true"
    )
    rated.get_by_label("Why? (optional)").fill("Quick and right")
    rated.get_by_role("button", name="Save").click()

    def feedback():
        return db(lambda: AgentRun.objects.get(task="What is 17 * 23?").feedback)

    wait_for(lambda: feedback().comment == "Quick and right", "the comment to be saved")
    assert feedback().rating == "up"
    expect(rated.get_by_label("Why? (optional)")).to_have_value("Quick and right")

    # The composer's Stop stops the run going.
    send(page, "Count slowly to 8")
    stopping = page.locator("#" + last_turn(page).get_attribute("id"))
    expect(stopping.locator(".card.tool.status-ok")).not_to_have_count(0, timeout=WAIT_MS)
    expect(button).to_have_text("Stop")
    button.click()
    expect(stopping.locator(".card.answer.status-cancelled")).to_be_visible(timeout=WAIT_MS)
    expect(button).to_have_text("Send")
