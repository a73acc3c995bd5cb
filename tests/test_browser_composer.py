"""The composer and the socket when the network is slow or the server goes away, in Chromium
against daphne and a real worker: nothing a person types is lost while a send is on its way, a
task sent meanwhile is queued, and a page whose server restarted is live again within seconds
of its return, every step of a run that went on meanwhile shown once."""

import re
import urllib.request

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import WebSocketRoute, expect

from agent.models import AgentRun
from agent.queued import QueuedTask
from agent.runs import submit_first_run
from tests.conftest import wait_for
from tests.send_gate import APPLICATION, OPEN_PATH
from tests.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    card_ids,
    db,
    expected_ids,
    last_turn,
    logged_in,
)
from tests.test_browser_access import VIEWS, axe_violations, log_in
from tests.test_socket_page import step

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


def test_a_second_send_from_a_new_conversation_does_nothing_while_the_first_is_on_its_way(
    start_worker,
    start_daphne,
    browser,  # noqa: F811
):
    """The new conversation's composer posts as a page load: while that post waits at the
    server's door, a second Enter leaves the browser as nothing (the page cannot be read then:
    Playwright waits for the page the post loads). Once through, the first task is the
    conversation's one run."""
    start_worker()
    site = start_daphne(app=APPLICATION)
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    page.goto(f"{site.url}/")
    posts: list[str] = []
    page.on(
        "request", lambda request: posts.append(request.url) if request.method == "POST" else None
    )

    page.fill(TASK, "What is 17 * 23?")
    # The keyboard's own presses: a locator's would wait for the page the post loads.
    page.keyboard.press("Enter")
    # While the first send is on its way, an impatient person adds a word and sends again (a
    # second send of the very same text Chromium drops itself; another browser may not).
    page.keyboard.type(" Please.")
    page.keyboard.press("Enter")
    urllib.request.urlopen(site.url + OPEN_PATH, timeout=60).close()  # noqa: S310

    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    assert posts == [f"{site.url}/send/"]
    assert db(lambda: list(AgentRun.objects.values_list("task", flat=True))) == ["What is 17 * 23?"]
    assert db(QueuedTask.objects.count) == 0


def test_a_restarted_server_brings_the_page_back_live_with_every_step_once(
    start_worker,
    start_daphne,
    browser,  # noqa: F811
    settings,
):
    settings.LOOP_MAX_ITERATIONS = 22  # a step a count, and the answer: under the cap
    start_worker()
    site = start_daphne()
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 20", model="mock"))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    page.add_init_script(COUNT_TRIES)
    page.goto(f"{site.url}/c/{run.conversation_id}/")
    status = page.locator("#socket-status")
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    turn = page.locator(f"#run-{run.pk}")
    expect(turn.locator(".card.tool.status-ok")).not_to_have_count(0, timeout=WAIT_MS)

    site.process.kill()
    site.process.wait(timeout=60)
    steps_then = db(run.tool_executions.count)
    expect(status).to_have_text("◌ reconnecting…", timeout=WAIT_MS)
    expect(status).to_have_attribute("title", re.compile("tries again every few seconds"))
    # Away long enough for the waits between tries to have grown to their longest.
    tries = page.evaluate("window.socketTries")
    wait_for(lambda: page.evaluate("window.socketTries") >= tries + 5, "five more tries")
    assert db(run.tool_executions.count) > steps_then  # the run went on meanwhile
    start_daphne(port=site.port)
    expect(status).to_have_text("● live", timeout=BACK_LIVE_MS)
    assert status.get_attribute("title") is None  # no longer says it tries again

    expect(turn.locator(".card.answer")).to_contain_text("I counted to 20", timeout=WAIT_MS)
    run = db(lambda: AgentRun.objects.get(pk=run.pk))
    assert card_ids(turn) == db(lambda: expected_ids(run))  # no gap, none twice
    ids = page.locator("[id]").evaluate_all("elements => elements.map(element => element.id)")
    assert len(ids) == len(set(ids))


class ClosedOnce:
    """Routes the page's socket to the server, but answers its first with a final close (as a
    server that ends the socket for good), which leaves the page not live."""

    def __init__(self) -> None:
        self.connections = 0

    def __call__(self, socket: WebSocketRoute) -> None:
        self.connections += 1
        if self.connections == 1:
            socket.close(code=1000)
        else:
            socket.connect_to_server()


def test_reconnect_now_brings_a_page_that_is_not_live_back(start_daphne, browser):  # noqa: F811
    site = start_daphne()
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 3", model="mock"))
    found = {}
    views = [(scheme, view) for scheme in ("dark", "light") for view in ("phone", "laptop")]
    for scheme, view in views:  # the last: the laptop's, in light
        page = log_in(browser, site.url, "alice", VIEWS[view], scheme=scheme)
        page.route_web_socket("**/ws/runs/", ClosedOnce())
        page.goto(f"{site.url}/c/{run.conversation_id}/")
        status = page.locator("#socket-status")
        expect(status).to_have_text("■ not live: reload the page", timeout=WAIT_MS)
        expect(status).to_have_attribute("title", re.compile("reconnect, or reload"))
        reconnect = page.get_by_role("button", name="Reconnect now")
        expect(reconnect).to_be_visible()
        page.screenshot(path=ARTIFACTS / f"chat-not-live-{scheme}-{view}.png")
        if violations := axe_violations(page):
            found[f"{scheme} {view}"] = violations
    assert found == {}, found

    missed = step(run, 1)  # stored while the page had no socket
    reconnect.focus()
    page.keyboard.press("Enter")
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    expect(reconnect).to_be_hidden()
    expect(page.locator(missed)).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f"#run-{run.pk}-steps .card")).to_have_count(1)
