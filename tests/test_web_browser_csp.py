"""The site under its Content-Security-Policy in a real browser (Chromium through Playwright,
against a live daphne and worker): the chat, its live socket, renaming and deleting with the
confirmation, and the admin all work, and the browser reports no violation of the policy."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from agent.models import Conversation
from memory.models import ForgottenMemory, Memory
from tests.conftest import wait_for
from tests.test_browser import DEMO, LAPTOP, PASSWORD, WAIT_MS, browser, db, last_turn, live_site

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser", "live_site"]  # the fixtures this module borrows

# Every violation the page sees, however it was caused, reported to the test as it happens.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.reportViolation(`${event.violatedDirective} ${event.blockedURI} ${where}`);
});
"""


def watched_page(browser: Browser, violations: list[str]) -> Page:
    page = browser.new_context(viewport=LAPTOP).new_page()
    page.expose_function("reportViolation", lambda text: violations.append(text))
    page.add_init_script(REPORT_VIOLATIONS)

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", on_console)
    return page


def test_the_chat_and_the_admin_work_under_the_policy_with_no_violation(live_site, browser):
    db(lambda: User.objects.create_superuser("alice", password=PASSWORD))
    violations: list[str] = []
    page = watched_page(browser, violations)
    page.goto(f"{live_site}/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_site}/")

    # The run's steps arrive over the socket the policy allows.
    page.click(f"button[name=task][value='{DEMO}']")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)
    conversation = db(lambda: Conversation.objects.get(owner__username="alice"))
    # The worker remembers the outcome after the answer is shown; the page then offers to forget it.
    wait_for(lambda: db(Memory.objects.exists), "the run's outcome to be remembered")

    page.click("summary[aria-label='Conversation actions']")
    page.fill("#rename-title", "Sums")
    page.click("form[action$='/rename/'] button[type=submit]")
    expect(page.locator("h1.title")).to_have_text("Sums")

    # The confirmation comes from chat.js: declined, nothing happens; accepted, it is deleted.
    page.click("summary[aria-label='Conversation actions']")
    expect(page.get_by_label("Also forget what its runs remembered")).to_be_checked()
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("button.danger")
    assert db(lambda: Conversation.objects.filter(pk=conversation.pk, deleted_at=None).exists())
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button.danger")
    page.wait_for_url(f"{live_site}/")
    assert db(lambda: ForgottenMemory.objects.filter(forgotten_by__username="alice").exists())

    for path in ("/admin/", "/admin/agent/agentrun/", "/admin/memory/forgottenmemory/"):
        page.goto(f"{live_site}{path}")
        expect(page.locator("#site-name")).to_be_visible()
    assert violations == []
