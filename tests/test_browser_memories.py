"""Forgetting forgets the fact, in a real browser (Debian's Chromium through Playwright) against a
live daphne and a real worker: the sequence of issue 28. A person adds "My favourite city is
Lisbon" on the Memories page, asks a run about it (answered from the fact, and leaving no outcome
that repeats it), has a run save it to a file (whose outcome does repeat it), forgets the fact
on the Memories page, which offers that copy, ticked, and asks again in a new conversation: no
Lisbon in the answer, nor in anything recalled. Then a search by meaning. Screenshots land in
var/test-artifacts/ (docs/images/memories-forget.png is a copy of one)."""

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from memory.models import Memory, Origin
from memory.store import recall
from tests.conftest import wait_for
from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
    logged_in,
    send,
)
from tests.test_browser_files import recalled_texts, run_of

pytestmark = pytest.mark.django_db(transaction=True)

LISBON = "My favourite city is Lisbon"
QUESTION = "What is my favourite city?"
SAVED = "Save 'My favourite city is Lisbon' to city.txt"


def remember_by_hand(page: Page, site: str, text: str) -> None:
    page.goto(f"{site}/memories/")
    page.get_by_text("Remember this…").click()
    page.get_by_label("Something for Loop to remember about you").fill(text)
    page.get_by_role("button", name="Remember", exact=True).click()
    expect(page.locator(".notice")).to_have_text("Remembered.")


def ask_in_a_new_conversation(page: Page, site: str, task: str):
    page.goto(f"{site}/")
    send(page, task)
    answer = last_turn(page).locator(".card.answer")
    expect(answer).to_be_visible(timeout=WAIT_MS)
    return answer


def test_a_forgotten_fact_is_not_recalled_again(live_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)

    remember_by_hand(page, live_site, LISBON)
    fact = db(lambda: Memory.objects.get(owner=alice, origin=Origin.TOLD))
    expect(page.locator("#facts").locator(f"#memory-{fact.pk}")).to_contain_text(LISBON)

    # A run answers from the fact; it leaves no outcome repeating it.
    answer = ask_in_a_new_conversation(page, live_site, QUESTION)
    expect(answer).to_contain_text("your favourite city is Lisbon", timeout=WAIT_MS)
    first = db(lambda: run_of(QUESTION, 1))
    assert LISBON in db(lambda: recalled_texts(first))

    # A run that saves it to a file leaves an outcome that repeats it.
    answer = ask_in_a_new_conversation(page, live_site, SAVED)
    expect(answer).to_contain_text("city.txt", timeout=WAIT_MS)
    saved = db(lambda: run_of(SAVED, 1))
    copy = wait_for(
        lambda: db(lambda: Memory.objects.filter(source_run_id=saved.pk).first()),
        "the saving run's outcome to be stored",
    )
    assert not db(lambda: Memory.objects.filter(source_run_id=first.pk).exists())

    # The Memories page: the fact first; what the run left folded under "From your runs".
    page.goto(f"{live_site}/memories/")
    entry = page.locator(f"#facts #memory-{fact.pk}")
    expect(entry).to_be_visible()
    expect(page.locator(f"#memory-{copy.pk}")).to_be_hidden()
    page.get_by_text("From your runs").click()
    outcome = page.locator(f"#outcomes #memory-{copy.pk}")
    expect(outcome).to_be_visible()
    expect(outcome.get_by_role("link", name=f"run {saved.pk}")).to_have_attribute(
        "href", re.compile(rf"/c/\d+/#run-{saved.pk}$")
    )
    page.screenshot(path=ARTIFACTS / "memories-kinds.png", full_page=True)

    # Forget the fact: the copy is offered, ticked, and goes with it.
    entry.get_by_role("button", name="Forget", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Forget 1 memory and its copy?")
    offered = page.get_by_role("checkbox", name=re.compile("city.txt"))
    expect(offered).to_be_checked()
    page.screenshot(path=ARTIFACTS / "memories-forget.png", full_page=True)
    page.get_by_role("button", name="Forget", exact=True).click()
    page.wait_for_url(f"{live_site}/memories/")
    expect(page.locator(".notice")).to_have_text("Forgot 2 memories.")
    assert db(lambda: list(Memory.objects.filter(owner=alice))) == []

    # Asked again, in a new conversation: no Lisbon in the answer, nor in anything recalled.
    answer = ask_in_a_new_conversation(page, live_site, QUESTION)
    expect(answer).not_to_contain_text("Lisbon")
    again = db(lambda: run_of(QUESTION, 2))
    assert "lisbon" not in db(lambda: again.answer).lower()
    assert not any("lisbon" in text.lower() for text in db(lambda: recalled_texts(again)))
    assert not any("lisbon" in m.text.lower() for m in db(lambda: recall(alice, QUESTION)))


def test_memories_are_searched_by_meaning(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)
    for text in ("My favourite colour is green", LISBON, "My cat is called Miso"):
        remember_by_hand(page, live_site, text)
    page.get_by_role("searchbox", name="Search your memories").fill("which colour do I like")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r"/memories/\?q=which"))
    expect(page.locator("#facts .memory-body").first).to_have_text("My favourite colour is green")
    expect(page.locator("#facts")).not_to_contain_text("Miso")
