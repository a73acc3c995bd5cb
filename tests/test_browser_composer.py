"""The composer and the socket when the network is slow or the server goes away, in Chromium
against daphne and a real worker: nothing a person types is lost while a send is on its way, a
task sent meanwhile is queued, and a page whose server restarted is live again within seconds
of its return, every step of a run that went on meanwhile shown once."""

import urllib.request

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from agent.models import AgentRun
from agent.queued import QueuedTask
from agent.runs import submit_first_run
from tests.send_gate import APPLICATION, OPEN_PATH
from tests.test_browser import (  # noqa: F401 (fixtures)
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,
    card_ids,
    db,
    expected_ids,
    last_turn,
    logged_in,
)

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "textarea[name=task]"
BACK_LIVE_MS = 10_000  # the bound on a restarted server's page coming back, not a timing
# Count the page's tries to connect, and make the jitter in its waits between tries the longest
# it can be: the bound must hold at the worst.
COUNT_TRIES = """
window.socketTries = 0;
document.addEventListener("htmx:wsConnecting", () => { window.socketTries += 1; });
Math.random = () => 0.999;
"""


def test_typing_during_a_send_keeps_every_character_and_a_second_enter_queues(
    start_worker,
    start_daphne,
    browser,  # noqa: F811
):
    start_worker()
    site = start_daphne(app=APPLICATION, LOOP_TASK_MAX_CHARS="60")
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    first = db(lambda: submit_first_run(alice, "What is 17 * 23?", model="mock"))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    page.goto(f"{site.url}/c/{first.conversation_id}/")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    box = page.locator(TASK)

    # The send waits at the server's door; the box is emptied as it leaves, and what is typed
    # meanwhile, and sent, and typed after, is all kept.
    page.fill(TASK, "Count slowly to 8")
    page.press(TASK, "Enter")
    page.keyboard.type("Save that to answer.txt")
    expect(box).to_have_value("Save that to answer.txt")
    page.keyboard.press("Enter")  # while the first send is still on its way
    expect(box).to_have_value("")
    page.keyboard.type("and then tell me")
    urllib.request.urlopen(site.url + OPEN_PATH, timeout=60).close()  # noqa: S310

    expect(page.locator(".turn")).to_have_count(2, timeout=WAIT_MS)
    expect(last_turn(page).locator(".you .task")).to_have_text("Count slowly to 8")
    queue = page.locator("#queue .queued")
    expect(queue).to_have_count(1, timeout=WAIT_MS)
    expect(queue).to_contain_text("Save that to answer.txt")
    expect(box).to_have_value("and then tell me")
    queued = db(lambda: list(QueuedTask.objects.values_list("text", flat=True)))
    assert queued == ["Save that to answer.txt"]
    assert db(AgentRun.objects.count) == 2

    # A refused send gives the person their text back.
    refused = "Please count " + "very " * 20 + "slowly"
    page.fill(TASK, refused)
    page.press(TASK, "Enter")
    expect(page.locator("#send-error")).to_contain_text("the limit is 60", timeout=WAIT_MS)
    expect(box).to_have_value(refused)
