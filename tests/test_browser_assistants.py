"""Assistants in a real browser (Debian's Chromium through Playwright) against a live daphne and
a real worker: a person makes one on the Assistants page, then, keyboard only, types "/" first in
the empty composer, filters the list, moves with the arrow keys, picks with Enter (a chip shows
it), and sends: the conversation runs as the assistant's version and its header names it.
Escape closes the list and gives the task box back; the chip's remove button takes back the
pick. axe finds nothing on the Assistants page, its form, or the chat with the list open."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from agent.models import AgentRun
from assistants.models import Assistant
from tests.test_assistants import made
from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
)
from tests.test_browser_access import axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "What is 17 * 23?"  # the mock: one run_code call, then the answer


def test_a_conversation_is_started_with_an_assistant_by_keyboard(live_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    db(lambda: made(alice, name="Gardener", description="Plants, in Latin"))
    page = log_in(browser, live_site, "alice", LAPTOP)

    # The Assistants page, and a new one made on its form.
    page.goto(f"{live_site}/assistants/")
    expect(page.get_by_role("link", name="Assistants")).to_have_attribute("aria-current", "page")
    assert axe_violations(page) == []
    page.get_by_role("link", name="New assistant").click()
    assert axe_violations(page) == []
    page.get_by_label("Name").fill("Arithmetician")
    page.get_by_label("Instructions").fill("Show your sums.")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".notice")).to_contain_text("Saved Arithmetician (version 1)")
    arithmetician = db(lambda: Assistant.objects.get(name="Arithmetician"))

    # "/" first in the empty composer: the list, filtered as she types, keyboard only.
    page.goto(f"{live_site}/")
    task = page.locator("#task")
    expect(task).to_be_focused()
    page.keyboard.type("/")
    combobox = page.get_by_role("combobox", name="Pick an assistant")
    expect(combobox).to_be_focused()
    expect(combobox).to_have_attribute("aria-expanded", "true")
    options = page.get_by_role("listbox", name="Assistants").get_by_role("option")
    expect(options).to_have_count(2)
    assert axe_violations(page) == []
    page.keyboard.type("ar")  # both hold "ar": Gardener, Arithmetician
    expect(options).to_have_count(2)
    page.keyboard.type("i")  # "ari": Arithmetician alone
    expect(options).to_have_count(1)
    page.screenshot(path=ARTIFACTS / "assistants-slash.png")
    expect(options.first).to_have_attribute("aria-selected", "true")
    expect(combobox).to_have_attribute(
        "aria-activedescendant", f"assistant-option-{arithmetician.pk}"
    )
    page.keyboard.press("Enter")
    expect(task).to_be_focused()
    expect(page.locator("#assistant-chip")).to_contain_text("Arithmetician")
    expect(page.locator("#assistant-pick")).to_have_value(str(arithmetician.pk))

    # Escape closes a list opened again, and leaves the task box empty and focused.
    page.keyboard.type("/")
    expect(combobox).to_be_focused()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Escape")
    expect(page.locator("#assistant-slash")).to_be_hidden()
    expect(task).to_be_focused()
    expect(task).to_have_value("")
    expect(page.locator("#assistant-pick")).to_have_value(str(arithmetician.pk))

    # Sent: the conversation is the assistant's, its header says so, the run records it.
    page.keyboard.type(TASK)
    page.keyboard.press("Enter")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    expect(page.locator("#conversation-assistant")).to_contain_text("Arithmetician")
    run = db(lambda: AgentRun.objects.select_related("assistant_version").get())
    assert run.assistant_version is not None
    assert run.assistant_version.assistant_id == arithmetician.pk
    assert run.allowed["assistant"]["name"] == "Arithmetician"


def test_the_chip_removes_the_pick_before_the_first_send(live_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    gardener = db(lambda: made(alice, name="Gardener"))
    page = log_in(browser, live_site, "alice", PHONE)
    page.goto(f"{live_site}/?assistant={gardener.pk}")  # "Start a conversation"
    chip = page.locator("#assistant-chip")
    expect(chip).to_contain_text("Gardener")
    page.get_by_role("button", name="Remove the assistant").focus()
    page.keyboard.press("Enter")
    expect(chip).to_be_hidden()
    expect(page.locator("#assistant-pick")).to_have_value("")
    expect(page.locator("#task")).to_be_focused()
    page.keyboard.type(TASK)
    page.keyboard.press("Enter")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    assert db(lambda: AgentRun.objects.get().assistant_version) is None
    page.goto(f"{live_site}/assistants/")
    page.screenshot(path=ARTIFACTS / "assistants-phone.png")
    assert axe_violations(page) == []
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"]
