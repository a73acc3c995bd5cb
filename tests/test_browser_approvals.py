"""Calls that wait for a person's decision, in a real browser (Chromium through Playwright)
against a live daphne and a real worker, on a site that asks before every run_code: a task's
call shows as a card (its code highlighted) and waits; approved, the call runs and the answer
comes; edited, it runs with the person's code; denied with a reason, the card says so and the
model's answer follows; on a site that asks before writes, a write_file call shows its diff
against the person's file, and approved, writes it. Each card's screenshot lands in
var/screenshots/ (the whole page's in var/test-artifacts/ too, docs/images/ with
LOOP_DOC_IMAGES=1, for docs/chat.md)."""

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from tests.conftest import PROJECT_DIR
from tests.doc_images import doc_image
from tests.test_browser import (  # noqa: F401 (browser is a fixture)
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,
    db,
    last_turn,
    logged_in,
    pytestmark,
    send,
    site,
)
from tests.test_browser_access import axe_violations, log_in
from tools.context import context_for

SCREENSHOTS = PROJECT_DIR / "var" / "screenshots"


@pytest.fixture
def asking_site(worker_env, start_worker) -> Iterator[str]:
    """The site, asking its people before every run_code call."""
    with site(worker_env, start_worker, LOOP_APPROVAL="run_code=ask") as url:
        yield url


@pytest.fixture
def asking_before_writes(worker_env, start_worker) -> Iterator[str]:
    """The site, asking its people before every write_file call."""
    with site(worker_env, start_worker, LOOP_APPROVAL="write_file=ask") as url:
        yield url


def waiting_card(page: Page):
    """The last turn's card of a call waiting for a decision, once it shows, with the title's
    count of it."""
    card = last_turn(page).locator(".card.approval.waiting")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.locator(".tool-name")).to_have_text("run_code")
    expect(card).to_contain_text("The site asks before every run_code call.")
    expect(last_turn(page).locator(".run-status")).to_contain_text("Waiting for your decision")
    expect(page).to_have_title("(1) What is 17 * 23? · Loop")
    return card


def shot(card, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=SCREENSHOTS / name)


def test_a_person_approves_edits_and_denies_calls_that_wait_for_them(asking_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, asking_site, "alice", LAPTOP)

    # Approve: the call runs once, and the answer comes, live.
    send(page, "What is 17 * 23?")
    card = waiting_card(page)
    expect(card.locator("pre.highlight .nb")).to_have_text("print")  # highlighted on the server
    expect(page.locator("#waiting-count")).to_contain_text("1 call waits for your decision")
    expect(page.locator("#sidebar .icon.status-awaiting_approval")).to_have_count(1)
    shot(card, "approval-waiting.png")
    page.screenshot(path=SCREENSHOTS / "approval-page.png")
    page.screenshot(path=doc_image("chat-approval.png"))  # docs/chat.md shows it
    card.get_by_role("button", name="Approve", exact=True).click()
    turn = last_turn(page)
    decided = turn.locator(".card.approval.decision-approve")
    expect(decided).to_contain_text("Approved")
    expect(decided.locator("form")).to_have_count(0)
    expect(turn.locator(".card.answer")).to_contain_text("17 * 23 = 391", timeout=WAIT_MS)
    expect(turn.locator(".card.tool.status-ok")).to_have_count(1)
    expect(page).to_have_title("What is 17 * 23? · Loop")
    expect(page.locator("#waiting-count")).to_be_hidden()
    expect(page.locator("#sidebar .icon.status-succeeded")).to_have_count(1)
    shot(decided, "approval-approved.png")

    # Edit and approve: it runs with the person's code, which the model reads.
    send(page, "What is 6 * 7?")
    card = waiting_card(page)
    card.locator("summary", has_text="Edit and approve").click()
    card.get_by_label("The code it runs").fill("x = 6 * 8\nprint(x)")
    shot(card, "approval-editing.png")
    card.get_by_role("button", name="Approve with my changes").click()
    turn = last_turn(page)
    edited = turn.locator(".card.approval.decision-edit")
    expect(edited).to_contain_text("Edited and approved")
    expect(edited.locator("pre.highlight")).to_contain_text("x = 6 * 8")
    expect(turn.locator(".card.answer")).to_contain_text("6 * 7 = 48", timeout=WAIT_MS)
    shot(edited, "approval-edited.png")

    # An invalid edit is refused in the card, which still waits.
    send(page, "What is 2 + 2?")
    card = waiting_card(page)
    card.locator("summary", has_text="Edit and approve").click()
    card.get_by_label("The code it runs").fill("")
    card.get_by_role("button", name="Approve with my changes").click()
    expect(card.locator(".decide-refusal")).to_contain_text(
        "The edited arguments do not fit run_code"
    )
    expect(card).to_have_class("card approval waiting")

    # Deny with a reason: the card says so, and the model answers from the denial.
    card.get_by_label("Why you deny it (optional)").fill("not on my machine")
    card.get_by_role("button", name="Deny").click()
    turn = last_turn(page)
    denied = turn.locator(".card.approval.decision-deny")
    expect(denied).to_contain_text("You declined this call")
    expect(denied).to_contain_text("Reason: not on my machine")
    expect(turn.locator(".card.answer")).to_contain_text("not on my machine", timeout=WAIT_MS)
    expect(turn.locator(".card.tool.status-denied")).to_have_count(1)
    shot(denied, "approval-denied.png")

    decisions = db(lambda: list(ApprovalRequest.objects.values_list("decision", flat=True)))
    assert sorted(decisions) == ["approve", "deny", "edit"]
    # A reload draws the same cards from the log.
    page.reload()
    expect(page.locator(".card.approval.decided")).to_have_count(3)
    expect(page.locator(".card.approval form")).to_have_count(0)


def test_a_write_shows_its_diff_and_a_decision_elsewhere_reaches_the_page_live(
    asking_before_writes,
    browser,  # noqa: F811
):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    notes = db(lambda: context_for(alice).workspace) / "notes.txt"
    notes.write_text("buy eggs\n")
    page = logged_in(browser, asking_before_writes, "alice", LAPTOP)
    send(page, "Save 'buy milk' to notes.txt")
    card = last_turn(page).locator(".card.approval.waiting")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.locator(".write-path")).to_have_text("It writes notes.txt.")
    expect(card.locator(".diff .gd")).to_have_text(["--- notes.txt (now)", "-buy eggs"])
    expect(card.locator(".diff .gi")).to_have_text(["+++ notes.txt (after)", "+buy milk"])
    shot(card, "approval-write-diff.png")
    expect(page).to_have_title("(1) Save 'buy milk' to notes.txt · Loop")

    # Approved from another device, the first page hears of it live. That page, dark, with the
    # card's folded parts open, is one axe-core finds nothing wrong with.
    phone = log_in(browser, asking_before_writes, "alice", PHONE, scheme="dark")
    phone.goto(page.url)
    waiting = phone.locator(".card.approval.waiting")
    for folded in waiting.locator("summary").all():
        folded.click()
    assert axe_violations(phone) == []
    waiting.get_by_role("button", name="Approve", exact=True).click()
    decided = last_turn(page).locator(".card.approval.decision-approve")
    expect(decided).to_contain_text("Approved", timeout=WAIT_MS)
    expect(page).to_have_title("Save 'buy milk' to notes.txt · Loop")
    expect(last_turn(page).locator(".card.answer")).to_be_visible(timeout=WAIT_MS)
    assert notes.read_text() == "buy milk"
