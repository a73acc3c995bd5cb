"""The chat in a real browser (Debian's Chromium through Playwright), against a live daphne and a
real worker, as two people would use it. Screenshots land in var/test-artifacts/."""

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import Browser, Page, expect, sync_playwright

from agent.models import AgentRun, Conversation
from agent.selectors import events_of
from chat.rendering import page_cards
from tests.conftest import PROJECT_DIR, child_environment, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = PROJECT_DIR / "var" / "test-artifacts"
PASSWORD = "a long enough passphrase 42"
WAIT_MS = 60_000  # a bound that turns a hang into a failure, not a timing assertion
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
DEMO = "Compute the sum of 1..100 and save it to a file"

# Every card the page is given, in the order it arrived: proof that steps came before answers.
RECORD_ARRIVALS = """
window.arrivals = [];
new MutationObserver((mutations) => {
  for (const mutation of mutations) for (const node of mutation.addedNodes) {
    if (node.nodeType === 1 && node.classList.contains("card")) {
      window.arrivals.push(node.id + " " + node.className);
    }
  }
}).observe(document, {childList: true, subtree: true});
"""


T = TypeVar("T")


def db(query: Callable[[], T]) -> T:
    """Run a database query in a thread of its own, which closes its connection after.

    Playwright's sync API runs an event loop and switches contexts in the test's thread: queries
    made there would refuse to run, or leave a connection open that no one closes.
    """

    def run() -> T:
        try:
            return query()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def site(
    worker_env: dict[str, str], start_worker: Callable[..., object], **env: str
) -> Iterator[str]:
    """daphne serving Loop, and one worker, both with the given settings: what `make run`
    starts. Yields the site's address."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
         "loopsite.asgi:application"],
        cwd=PROJECT_DIR,
        env=child_environment(**worker_env, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    start_worker(**env)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=5) as response:  # noqa: S310
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for(answers, "daphne to answer")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=60)  # start_worker then waits for both processes' sessions to end


@pytest.fixture
def live_site(worker_env, start_worker) -> Iterator[str]:
    with site(worker_env, start_worker) as url:
        yield url


@pytest.fixture
def capped_site(worker_env, start_worker) -> Iterator[str]:
    """The site with a cap of two model turns a run: the demo halts before it saves its file."""
    with site(worker_env, start_worker, LOOP_MAX_ITERATIONS="2") as url:
        yield url


@pytest.fixture
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def logged_in(browser: Browser, site: str, username: str, viewport: dict[str, int]) -> Page:
    page = browser.new_context(viewport=viewport).new_page()
    page.add_init_script(RECORD_ARRIVALS)
    page.goto(f"{site}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/")
    return page


def send(page: Page, task: str) -> None:
    turns = page.locator(".turn").count()
    page.fill("textarea[name=task]", task)
    page.press("textarea[name=task]", "Enter")
    expect(page.locator(".turn")).to_have_count(turns + 1, timeout=WAIT_MS)


def last_turn(page: Page):
    return page.locator(".turn").last


def card_ids(turn) -> list[str]:
    return turn.locator(".card").evaluate_all("cards => cards.map(card => card.id)")


def expected_ids(run: AgentRun) -> list[str]:
    return [card.id for card in page_cards(run.pk, events_of(run))]


def test_two_people_use_the_chat(live_site, browser):
    for name in ("alice", "bob"):
        db(lambda name=name: User.objects.create_user(name, password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)
    expect(page.locator("header .model")).to_contain_text("model: mock")

    # The demo: each step appears, then the answer.
    page.click(f"button[name=task][value='{DEMO}']")
    turn = last_turn(page)
    expect(turn.locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)
    expect(turn.locator(".card.tool .tool-name")).to_have_text(
        ["run_code", "read_file", "write_file"]
    )
    conversation = db(lambda: Conversation.objects.get(owner__username="alice"))
    assert page.url == f"{live_site}/c/{conversation.pk}/"

    # A follow-up in the same conversation acts on the earlier answer.
    send(page, "Save that to result.txt")
    expect(last_turn(page).locator(".card.answer")).to_have_text(
        "✓ Loop Done I saved 5050 to result.txt.", timeout=WAIT_MS
    )
    page.screenshot(path=ARTIFACTS / "chat-laptop.png")
    phone = logged_in(browser, live_site, "alice", PHONE)
    phone.goto(f"{live_site}/c/{conversation.pk}/")
    phone.screenshot(path=ARTIFACTS / "chat-phone.png")

    # A long run streams its steps before its answer.
    page.evaluate("window.arrivals = []")
    send(page, "Count slowly to 3")
    expect(last_turn(page).locator(".card.answer")).to_contain_text(
        "I counted to 3", timeout=WAIT_MS
    )
    arrivals = page.evaluate("window.arrivals")
    first_result = next(i for i, card in enumerate(arrivals) if "status-ok" in card)
    answer = next(i for i, card in enumerate(arrivals) if "answer" in card)
    assert first_result < answer, arrivals

    # Stop a long run.
    send(page, "Count slowly to 8")
    turn = last_turn(page)
    expect(turn.locator(".card.tool.status-ok")).not_to_have_count(0, timeout=WAIT_MS)
    turn.get_by_role("button", name="Stop").click()
    expect(turn.locator(".card.answer.status-cancelled")).to_be_visible(timeout=WAIT_MS)
    stopped = db(lambda: AgentRun.objects.get(task="Count slowly to 8"))
    assert stopped.status == "cancelled"
    assert db(stopped.tool_executions.count) < 8

    # Reload in the middle of a run: no step missing, none doubled.
    send(page, "Count slowly to 4")
    expect(last_turn(page).locator(".card.tool.status-ok")).not_to_have_count(0, timeout=WAIT_MS)
    page.reload()
    turn = last_turn(page)
    expect(turn.locator(".card.answer")).to_contain_text("I counted to 4", timeout=WAIT_MS)
    run = db(lambda: AgentRun.objects.get(task="Count slowly to 4"))
    assert card_ids(turn) == db(lambda: expected_ids(run))
    ids = page.locator("[id]").evaluate_all("elements => elements.map(element => element.id)")
    assert len(ids) == len(set(ids))

    # Bob sees nothing of Alice's.
    bob = logged_in(browser, live_site, "bob", LAPTOP)
    expect(bob.locator(".conversations")).not_to_contain_text("Compute the sum")
    assert bob.goto(f"{live_site}/c/{conversation.pk}/").status == 404
    assert bob.request.get(f"{live_site}/runs/{run.pk}/").status == 404
    assert Path(ARTIFACTS / "chat-phone.png").stat().st_size > 0


def test_a_halted_run_is_continued_live_to_its_end(capped_site, browser):
    """At a cap of two model turns the demo halts before it has saved the file; Continue gives it
    a fresh set of limits and the page follows it, without a reload, to its answer."""
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, capped_site, "alice", LAPTOP)
    page.click(f"button[name=task][value='{DEMO}']")
    turn = last_turn(page)
    expect(turn.locator(".card.answer.status-halted")).to_be_visible(timeout=WAIT_MS)
    run = db(lambda: AgentRun.objects.get())
    assert (run.status, run.halt_reason) == ("halted", "iteration_cap")
    ran_before = db(lambda: list(run.tool_executions.values_list("call_id", flat=True)))

    page.evaluate("window.arrivals = []; window.sameDocument = true")
    turn.get_by_role("button", name="Continue").click()
    turn = page.locator(f"#run-{run.pk}")
    expect(turn.locator(".card.marker")).to_have_text(
        "↻ Continued: you asked it to go on", timeout=WAIT_MS
    )
    expect(turn.locator(".card.answer.status-succeeded")).to_contain_text(
        "The sum of 1..100 is 5050. I saved it to sum.txt.", timeout=WAIT_MS
    )
    expect(turn.get_by_role("button", name="Continue")).to_have_count(0)
    expect(page.locator(".send-error")).to_be_empty()
    # It came live over the socket: the page was never reloaded.
    assert page.evaluate("window.sameDocument === true")
    arrivals = page.evaluate("window.arrivals")
    assert any("status-succeeded" in card for card in arrivals), arrivals
    page.screenshot(path=ARTIFACTS / "chat-continued.png")
    run = db(lambda: AgentRun.objects.get())
    assert run.status == "succeeded"
    assert card_ids(turn) == db(lambda: expected_ids(run))
    calls = db(lambda: list(run.tool_executions.values_list("call_id", flat=True)))
    assert len(calls) == len(set(calls))  # no tool call ran twice
    assert set(ran_before) < set(calls)
