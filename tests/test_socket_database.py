"""The page's socket when its database does not answer (a restart, a connection lost): it closes
with a code the page connects again after, never the final one of a bug, and the page, connected
again once the database is back, catches up from the log. daphne reaches the suite's real
PostgreSQL through a door the test shuts (tests/socket_harness.py's DatabaseGate)."""

import time
from collections.abc import Callable, Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from playwright.sync_api import Browser, WebSocketRoute, expect, sync_playwright
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection

from agent.recorder import RunRecorder
from agent.runs import start_run, submit_first_run
from chat.consumers import Close
from core.events import ToolCallStarted
from tests.conftest import wait_for
from tests.socket_harness import (
    DatabaseGate,
    LiveSite,
    closing,
    daphnes,
    open_socket,
    session_cookie,
    watch,
)
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, PASSWORD, WAIT_MS, db, logged_in

pytestmark = pytest.mark.django_db(transaction=True)

# The most daphne's pool waits for a connection: while the door is shut, a read fails after it.
POOL_WAIT = "3"


@pytest.fixture
def gate(transactional_db) -> Iterator[DatabaseGate]:
    params = connection.get_connection_params()
    socket_path = f"{params['host']}/.s.PGSQL.{params.get('port') or 5432}"
    door = DatabaseGate(socket_path, connection.settings_dict["NAME"], params["user"])
    yield door
    door.close()


@pytest.fixture
def start_gated_daphne(worker_env, gate, tmp_path) -> Iterator[Callable[[], LiveSite]]:
    """daphne on the test's database, reached through the gate only."""
    env = {**worker_env, "DATABASE_URL": gate.url, "LOOP_DB_POOL_TIMEOUT": POOL_WAIT}
    started = daphnes(env, tmp_path)
    yield next(started)
    next(started, None)  # stops them


def step(run, number: int) -> int:
    """Store a step of the run as a worker would (on the test's own connection); its seq."""
    event = ToolCallStarted(step=number, call_id=f"c{number}", tool="run_code", arguments="{}")
    recorder = RunRecorder(run)
    recorder(event)
    return recorder.seq


def test_a_socket_whose_database_does_not_answer_closes_for_the_page_to_connect_again(
    start_gated_daphne, gate, alice
):
    run = start_run(alice, "Count slowly to 3", model="mock")
    step(run, 1)
    site = start_gated_daphne()
    with open_socket(site, session_cookie(alice)) as page:  # its session read through the gate
        gate.shut()
        watch(page, run.pk)  # the socket's read of the run's log finds the database away
        code, frames = closing(page)
    assert code == Close.UNAVAILABLE, frames
    assert not any('data-state="closed"' in frame for frame in frames)  # not "reload the page"

    gate.reopen()
    later = step(run, 2)
    with connected_again(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        caught_up = ""
        while f'data-seq="{later}"' not in caught_up:
            caught_up += page.recv(timeout=60)
    assert f"call-{run.pk}-1-c1" in caught_up
    assert f"call-{run.pk}-2-c2" in caught_up


def connected_again(site: LiveSite, cookie: str) -> ClientConnection:
    """The socket as the page opens it again once the database is back: chat.js tries again,
    with a growing wait, after a handshake the server refused (on a busy machine, the first one
    after the outage may still meet a pooled session the outage killed: a 500)."""
    for attempt in range(1, 6):
        try:
            return open_socket(site, cookie)
        except InvalidStatus as refused:
            if refused.response.status_code < 500 or attempt == 5:
                raise
            time.sleep(attempt)
    raise AssertionError("unreachable")


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class HeldFirstSocket:
    """Routes the page's sockets to the server. The first one's messages from the page are held
    until `let_through`, so the test decides when the server reads the database for them, and
    its close by the server is noted (and passed on) so the test knows when it came."""

    def __init__(self) -> None:
        self.connections = 0
        self.held: list[str | bytes] = []
        self.server: WebSocketRoute | None = None
        self.closed: int | None = None

    def __call__(self, page: WebSocketRoute) -> None:
        self.connections += 1
        server = page.connect_to_server()
        if self.connections == 1:
            self.server = server
            page.on_message(self.hold)

            def passed_on(code: int | None, reason: str | None) -> None:
                self.closed = code
                page.close(code=code, reason=reason)

            server.on_close(passed_on)

    def hold(self, message: str | bytes) -> None:
        self.held.append(message)

    def let_through(self) -> None:
        assert self.server is not None
        for message in self.held:
            self.server.send(message)


def test_the_page_connects_again_after_its_database_did_not_answer_and_catches_up(
    start_gated_daphne, gate, browser
):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    run = db(lambda: submit_first_run(alice, "Count slowly to 3", model="mock"))
    site = start_gated_daphne()
    page = logged_in(browser, site.url, "alice", LAPTOP)
    sockets = HeldFirstSocket()
    page.route_web_socket("**/ws/runs/", sockets)
    page.goto(f"{site.url}/c/{run.conversation_id}/")
    status = page.locator("#socket-status")
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    # Each call to the page lets Playwright run the route's handlers.
    wait_for(lambda: page.evaluate("1") and sockets.held, "the page to ask for the run")

    gate.shut()
    sockets.let_through()  # the socket reads the run's log: the database does not answer
    wait_for(lambda: page.evaluate("1") and sockets.closed, "the server to close the socket")
    assert sockets.closed == Close.UNAVAILABLE
    expect(status).to_have_text("◌ reconnecting…", timeout=WAIT_MS)  # not "reload the page"
    missed = db(lambda: step(run, 1))  # stored while the page had no socket
    gate.reopen()
    expect(status).to_have_text("● live", timeout=WAIT_MS)
    expect(page.locator(f"#call-{run.pk}-1-c1")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(f"#run-{run.pk}-seq")).to_have_attribute("data-seq", str(missed))
    expect(page.locator(f"#run-{run.pk}-steps .card")).to_have_count(1)  # none twice
