"""A Continue redraws its turn from the log as it is when its request is answered, while the
page's socket goes on pushing the run's events: in a real browser (Debian's Chromium), with the
socket's frames and the response held and let through in the order that once left a card out
of place, the turn still shows each card once, in the log's order. No worker runs: the test
records the run's events itself, as a worker would."""

import time
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, Route, WebSocketRoute, expect, sync_playwright

from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import submit_first_run
from core.events import (
    ContinuedBy,
    Event,
    HaltReason,
    ResumeReason,
    RunFinished,
    RunResumed,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolStatus,
)
from tests.socket_harness import LiveSite
from tests.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    card_ids,
    db,
    expected_ids,
    logged_in,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class HeldSocket:
    """Routes the page's socket to the server; while `holding`, keeps what either side sends
    instead of passing it on, for the test to let through when it chooses."""

    def __init__(self) -> None:
        self.holding = False
        self.to_page: list[str] = []
        self.to_server: list[str] = []
        self.page: WebSocketRoute | None = None
        self.server: WebSocketRoute | None = None

    def __call__(self, page: WebSocketRoute) -> None:
        self.page = page
        self.server = page.connect_to_server()
        self.server.on_message(self.from_server)
        page.on_message(self.from_page)

    def from_server(self, message: str | bytes) -> None:
        assert self.page is not None
        if self.holding:
            self.to_page.append(str(message))
        else:
            self.page.send(message)

    def from_page(self, message: str | bytes) -> None:
        assert self.server is not None
        if self.holding:
            self.to_server.append(str(message))
        else:
            self.server.send(message)

    def pass_to_page(self, count: int) -> None:
        """Let the first `count` frames held for the page through."""
        assert self.page is not None
        frames, self.to_page = self.to_page[:count], self.to_page[count:]
        for frame in frames:
            self.page.send(frame)

    def let_go(self) -> None:
        """Pass on what is held, the page's frames first, and stop holding."""
        assert self.page is not None
        assert self.server is not None
        self.holding = False
        self.pass_to_page(len(self.to_page))
        for message in self.to_server:
            self.server.send(message)
        self.to_server = []


def until(page: Page, condition: Callable[[], bool], what: str) -> None:
    """Wait for a condition the test's own objects tell, letting Playwright hand them what
    arrives meanwhile (its callbacks run only while the test is in one of its calls)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, f"waited too long for {what}"
        page.wait_for_timeout(20)


def record(run: AgentRun, *events: Event) -> None:
    """Store events as the run's worker would, each in a commit of its own."""

    def store() -> None:
        recorder = RunRecorder(AgentRun.objects.get(pk=run.pk))
        for event in events:
            recorder(event)

    db(store)


def call(step: int) -> tuple[ToolCallStarted, ToolCallFinished]:
    call_id, arguments = f"c{step}", '{"code": "print(1)"}'
    started = ToolCallStarted(step=step, call_id=call_id, tool="run_code", arguments=arguments)
    finished = ToolCallFinished(
        step=step,
        call_id=call_id,
        tool="run_code",
        arguments=arguments,
        status=ToolStatus.OK,
        text="1",
        duration=0.01,
    )
    return started, finished


def marker(run: AgentRun, seq: int) -> str:
    return f'id="run-{run.pk}-seq" data-run="{run.pk}" data-seq="{seq}"'


def halted_on_its_page(site: LiveSite, browser: Browser) -> tuple[Page, AgentRun, HeldSocket]:
    """Alice's run, which works while her page watches it, and halts at its cap."""
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 3", model="mock"))
    page = logged_in(browser, site.url, "alice", LAPTOP)
    socket = HeldSocket()
    page.route_web_socket("**/ws/runs/", socket)
    page.goto(f"{site.url}/c/{run.conversation_id}/")
    expect(page.locator("#socket-status")).to_have_text("● live", timeout=WAIT_MS)
    halted = RunFinished(status=RunStatus.HALTED, answer="", halt_reason=HaltReason.ITERATION_CAP)
    record(run, *call(1), halted)
    turn = page.locator(f"#run-{run.pk}")
    expect(turn.locator(".card.answer.status-halted")).to_be_visible(timeout=WAIT_MS)
    return page, run, socket


def continue_held(page: Page, run: AgentRun) -> list[Route]:
    """Click Continue, its request held: the test answers it when it chooses."""
    requests: list[Route] = []
    page.route(f"**/runs/{run.pk}/continue/", lambda route: requests.append(route))
    page.locator(f"#run-{run.pk}").get_by_role("button", name="Continue").click()
    until(page, lambda: bool(requests), "the Continue's request")
    return requests


def asked_again(page: Page, run: AgentRun, socket: HeldSocket) -> None:
    """Wait for the page's ask to watch the run from its new turn's seq (held)."""
    until(page, lambda: any(f'"watch":{run.pk},' in m for m in socket.to_server), "its ask")


def goes_on_to_its_end(page: Page, run: AgentRun) -> None:
    """The run's last call and its answer reach the page; its turn shows every card of the log
    once, in the log's order."""
    record(run, *call(5), RunFinished(status=RunStatus.SUCCEEDED, answer="Counted to 3."))
    turn = page.locator(f"#run-{run.pk}")
    expect(turn.locator(".card.answer.status-succeeded")).to_be_visible(timeout=WAIT_MS)
    expect(turn.locator(".card.marker")).to_have_text(
        "↻ Continued: you asked it to go on", timeout=WAIT_MS
    )
    assert card_ids(turn) == db(lambda: expected_ids(run))


RESUMED = RunResumed(reason=ResumeReason.CONTINUED, by=ContinuedBy.OWNER)


def test_a_continued_turn_keeps_its_cards_in_order_whatever_the_socket_sent_around_it(
    start_daphne, browser
):
    """The response to Continue was drawn before the run went on; the socket pushed the run's
    next event into the turn that response then replaced, and the one after into the new turn,
    before the page asked again from the seq its new turn shows. The page must neither lose
    the first nor put it after the second."""
    page, run, socket = halted_on_its_page(start_daphne(), browser)
    halted_at = db(run.events.count)
    socket.holding = True
    [request] = continue_held(page, run)
    response = request.fetch()  # drawn now, as the run halted

    # The run goes on: the socket pushes its resumption, then its next call, in frames apart.
    record(run, RESUMED)
    until(page, lambda: marker(run, halted_at + 1) in "".join(socket.to_page), "the resumption")
    resumption = len(socket.to_page)
    record(run, *call(3))
    until(page, lambda: marker(run, halted_at + 3) in "".join(socket.to_page), "the next call")

    # The resumption reaches the turn still on the page, which the response then replaces.
    socket.pass_to_page(resumption)
    expect(page.locator(f"#ev-{run.pk}-{halted_at + 1}")).to_be_visible(timeout=WAIT_MS)
    request.fulfill(response=response)
    expect(page.locator(f"#ev-{run.pk}-{halted_at + 1}")).to_have_count(0, timeout=WAIT_MS)
    # The new turn asks again from its own seq; the next call's frame reaches it first.
    asked_again(page, run, socket)
    socket.let_go()
    goes_on_to_its_end(page, run)


def test_a_continued_turn_drawn_ahead_of_the_socket_keeps_following_the_run(start_daphne, browser):
    """The response to Continue was drawn after the run went on further than the socket had
    sent when the page asked again; the socket's frame from before reaches the new turn, then
    its answer to the ask. The page must take that answer and what follows, not hold the
    turn back to the socket's older frame and wait for ever."""
    page, run, socket = halted_on_its_page(start_daphne(), browser)
    halted_at = db(run.events.count)
    socket.holding = True
    [request] = continue_held(page, run)

    record(run, RESUMED)
    until(page, lambda: marker(run, halted_at + 1) in "".join(socket.to_page), "the resumption")
    resumption = len(socket.to_page)
    record(run, *call(3))
    request.fulfill(response=request.fetch())  # drawn with the next call
    expect(page.locator(f"#call-{run.pk}-3-c3.status-ok")).to_be_visible(timeout=WAIT_MS)
    asked_again(page, run, socket)
    # The socket heard the page's ask before the next call's wake-ups: it never sent that call.
    socket.to_page = socket.to_page[:resumption]
    socket.let_go()
    goes_on_to_its_end(page, run)
