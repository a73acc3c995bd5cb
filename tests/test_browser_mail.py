"""Password reset and custom instructions in a real browser (Debian's Chromium through Playwright),
against a live daphne and a real worker mailing through a real SMTP server (aiosmtpd): a person
who forgot their password follows the mail's link and logs in with the new one; a person sets
their instructions and a conversation's, and the next run reads both. axe finds nothing on each
page, light and dark, laptop and phone."""

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation
from tests.conftest import wait_for
from tests.mail_server import Mailbox, link_in, mailbox  # noqa: F401 (a fixture)
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM_ARGS,  # noqa: F401 (the launch flags the browser fixture uses)
    PASSWORD,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    send,
    site,
)
from tests.test_browser_access import VIEWS, axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

NEW_PASSWORD = "a brand new passphrase 77"
MINE = "Answer in French."
THREADS = "Plants are named in Latin here."


@pytest.fixture
def mailing_site(worker_env, start_worker, mailbox: Mailbox) -> Iterator[str]:  # noqa: F811
    """The site, its mail sent to the test's SMTP server."""
    mail = {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(mailbox.port)}
    with site(worker_env, start_worker, **mail) as url:
        yield url


def axe_everywhere(page: Page, url: str) -> dict[str, list[str]]:
    """axe's findings on `url` in light and dark, at laptop and phone sizes."""
    found = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for view, viewport in VIEWS.items():
            page.set_viewport_size(viewport)
            page.goto(url)
            if violations := axe_violations(page):
                found[f"{url} {scheme} {view}"] = violations
    return found


def test_a_forgotten_password_is_reset_from_the_mail(mailing_site, browser, mailbox):  # noqa: F811
    db(lambda: User.objects.create_user("alice", "alice@example.com", PASSWORD))
    page = browser.new_context(bypass_csp=True).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{mailing_site}/accounts/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    asked = page.url
    page.get_by_label("Your e-mail address").fill("alice@example.com")
    page.get_by_role("button", name="Send me a link").click()
    expect(page.get_by_role("heading", name="Check your mail")).to_be_visible()
    sent = page.url
    wait_for(lambda: mailbox.to("alice@example.com"), "the reset mail")
    page.goto(link_in(mailbox.to("alice@example.com")[0]))
    expect(page.get_by_role("heading", name="Choose a new password")).to_be_visible()
    chosen = page.url
    found = axe_everywhere(page, chosen)
    page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    page.get_by_label("New password confirmation").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set my password").click()
    expect(page.get_by_role("heading", name="Your new password is set")).to_be_visible()
    done = page.url
    page.get_by_role("link", name="Log in").click()
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", NEW_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/$"))
    expect(page.locator("#sidebar")).to_contain_text("alice")
    for url in (asked, sent, done, f"{mailing_site}/accounts/login/"):
        found.update(axe_everywhere(page, url))
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())


def test_a_person_sets_their_instructions_and_a_conversations(mailing_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    conversation = db(lambda: new_conversation(alice, "Garden"))
    page = log_in(browser, mailing_site, "alice", VIEWS["laptop"])
    page.set_default_timeout(WAIT_MS)
    page.get_by_role("link", name="Instructions").first.click()
    page.get_by_label(re.compile("How to answer me")).fill(MINE)
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    page.screenshot(path=ARTIFACTS / "instructions.png")
    found = axe_everywhere(page, page.url)
    page.goto(f"{mailing_site}/c/{conversation.pk}/")
    page.locator("summary[aria-label='Conversation actions']").click()
    page.get_by_label("Instructions for this conversation").fill(THREADS)
    page.get_by_role("button", name="Save instructions").click()
    page.locator("summary[aria-label='Conversation actions']").click()
    expect(page.get_by_label("Instructions for this conversation")).to_have_value(THREADS)
    page.screenshot(path=ARTIFACTS / "conversation-instructions.png")
    if violations := axe_violations(page):
        found["the conversation's open menu"] = violations
    send(page, "Say hello")
    run = wait_for(
        lambda: db(
            lambda: AgentRun.objects.filter(conversation=conversation, status="succeeded").first()
        ),
        "the run to end",
    )
    started = db(lambda: run.events.get(kind="run_started").event)
    assert (started.person_instructions, started.conversation_instructions) == (MINE, THREADS)
    assert db(lambda: Conversation.objects.get(pk=conversation.pk).instructions) == THREADS
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
