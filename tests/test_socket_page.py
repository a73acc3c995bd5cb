"""The page's side of a failing transport, in a real browser (Debian's Chromium): the header says
when live updates are delayed or the socket is gone, and a page whose socket comes back catches
up on what it missed."""

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, WebSocketRoute, expect, sync_playwright

from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import submit_first_run
from core.events import ToolCallStarted
from tests.socket_harness import LiveSite
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, PASSWORD, WAIT_MS, db, logged_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def a_run_on_its_page(browser: Browser, site: LiveSite) -> tuple[Page, AgentRun]:
    """Alice's conversation with a run that a worker has not picked up yet, open in a page."""
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 3", model="mock"))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    page.goto(f"{site.url}/c/{run.conversation_id}/")
    return page, run


def step(run: AgentRun, number: int) -> str:
    """Store a step of the run as a worker would; the id of its card."""
    db(
        lambda: RunRecorder(run)(
            ToolCallStarted(step=number, call_id=f"c{number}", tool="run_code", arguments="{}")
        )
    )
    return f"#call-{run.pk}-{number}-c{number}"


def test_the_page_says_live_updates_are_delayed_and_still_gets_them(
    start_daphne, browser, broken_redis
):
    site = start_daphne(REDIS_URL=broken_redis)
    page, run = a_run_on_its_page(browser, site)
    status = page.locator("#socket-status")
    expect(status).to_have_text("◌ reconnecting…", timeout=WAIT_MS)
    expect(status).to_have_attribute("data-state", "degraded")
    expect(page.locator(step(run, 1))).to_be_visible(timeout=WAIT_MS)  # read from the log


def test_a_page_whose_socket_drops_says_so_and_catches_up_when_it_is_back(start_daphne, browser):
    site = start_daphne()
    page, run = a_run_on_its_page(browser, site)
    status = page.locator("#socket-status")
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    expect(page.locator(step(run, 1))).to_be_visible(timeout=WAIT_MS)

    site.process.terminate()
    site.process.wait(timeout=60)
    expect(status).to_have_text("◌ reconnecting…", timeout=WAIT_MS)
    missed = step(run, 2)  # stored while the page had no socket
    start_daphne(port=site.port)
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    expect(page.locator(missed)).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f"#run-{run.pk}-steps .card")).to_have_count(2)  # none twice


class Replaying:
    """Routes the page's socket to the server, passing on each frame the server sends and
    keeping it, so the test can send one to the page again."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.page: WebSocketRoute | None = None

    def __call__(self, page: WebSocketRoute) -> None:
        self.page = page
        page.connect_to_server().on_message(self.passed_on)

    def passed_on(self, message: str | bytes) -> None:
        assert self.page is not None
        assert isinstance(message, str)
        self.frames.append(message)
        self.page.send(message)


def test_a_card_the_socket_sends_again_shows_once(start_daphne, browser):
    """The socket sends what follows the seq a page says it has, which a turn redrawn by a
    response (a Continue's) may already show (tests/test_consumer.py): the page adds no card
    twice."""
    site = start_daphne()
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 3", model="mock"))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    socket = Replaying()
    page.route_web_socket("**/ws/runs/", socket)
    page.goto(f"{site.url}/c/{run.conversation_id}/")
    first = step(run, 1)
    expect(page.locator(first)).to_be_visible(timeout=WAIT_MS)

    again = next(frame for frame in socket.frames if f'id="{first[1:]}"' in frame)
    socket.page.send(again)
    second = step(run, 2)  # its frame comes after the one sent again
    expect(page.locator(second)).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f"#run-{run.pk}-steps .card")).to_have_count(2)
