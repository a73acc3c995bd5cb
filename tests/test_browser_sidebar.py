"""Issue 40's sidebar in a real browser (Debian's Chromium through Playwright), against a live
daphne and a real worker: each conversation's menu by keyboard alone at laptop size and in the
phone's drawer (pin, archive and back, rename, export, delete), "More" bringing the next page
with the focus on its first conversation, and axe finding nothing with a menu open or a second
page shown. A screenshot of an open menu lands in var/test-artifacts/ (docs/images/ with
LOOP_DOC_IMAGES=1). The server's side is tests/test_sidebar.py."""

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from agent.models import Conversation
from chat.sidebar import PAGE_SIZE
from tests.doc_images import doc_image
from tests.test_browser import PASSWORD, browser, db, live_site  # noqa: F401 (fixtures)
from tests.test_browser_access import (
    LAPTOP,
    PHONE,
    axe_violations,
    log_in,
    past_conversation,
)
from tests.test_sidebar import many_conversations

pytestmark = pytest.mark.django_db(transaction=True)


def item(page: Page, title: str):
    exactly = re.compile(f"^{re.escape(title)}$")
    return page.locator("#conversation-list li", has=page.locator(".title", has_text=exactly))


def open_menu_by_keyboard(page: Page, title: str) -> None:
    """From the conversation's link, Tab to its menu's button and open it with Enter."""
    item(page, title).locator("a").first.focus()
    page.keyboard.press("Tab")
    summary = item(page, title).locator("summary")
    expect(summary).to_be_focused()
    expect(summary).to_have_accessible_name(f"Actions for {title}")
    # Asked for as its button got the focus: there before Enter opens it.
    expect(item(page, title).locator(".menu-body button", has_text="Rename")).to_be_attached()
    page.keyboard.press("Enter")
    expect(item(page, title).locator("details")).to_have_attribute("open", "")
    expect(item(page, title).get_by_role("button", name="Rename")).to_be_visible()
    expect(summary).to_be_focused()


def press_by_keyboard(page: Page, title: str, name: str) -> None:
    """Tab through the open menu to the button named `name` and press it with Enter: its form
    is sent, and the page it leads to has loaded."""
    target = item(page, title).get_by_role("button", name=name, exact=True)
    for _ in range(12):
        page.keyboard.press("Tab")
        if target.evaluate("element => element === document.activeElement"):
            break
    expect(target).to_be_focused()
    with page.expect_navigation():
        page.keyboard.press("Enter")


def titles(page: Page) -> list[str]:
    return page.locator("#conversation-list .conversations .title").all_inner_texts()


def test_the_menu_works_by_keyboard_at_laptop_and_phone_size_and_more_loads_the_next_page(
    live_site,  # noqa: F811
    browser,  # noqa: F811
):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    db(lambda: many_conversations(alice, PAGE_SIZE + 5))
    for title, days_ago in (("Travel plans", 40), ("Weekly plan", 0)):
        db(lambda t=title, d=days_ago: past_conversation(alice, t, f"A task of {t}", d))
    found: dict[str, list[str]] = {}

    page = log_in(browser, live_site, "alice", LAPTOP)
    expect(page.locator("#conversation-list .conversations li")).to_have_count(PAGE_SIZE)

    # Pin an old conversation: it heads the list, in a group of its own.
    open_menu_by_keyboard(page, "Weekly plan")
    if violations := axe_violations(page):
        found["menu open, laptop"] = violations
    page.locator("#sidebar").screenshot(path=doc_image("sidebar-menu.png"), scale="css")
    press_by_keyboard(page, "Weekly plan", "Pin")
    expect(page.locator("#conversation-list h2.group").first).to_have_text("Pinned")
    expect(page.locator("#conversation-list .conversations .title").first).to_have_text(
        "Weekly plan"
    )

    # Rename it inline, by keyboard: its new title in the list.
    open_menu_by_keyboard(page, "Weekly plan")
    field = item(page, "Weekly plan").get_by_label("New title")
    for _ in range(6):
        page.keyboard.press("Tab")
        if field.evaluate("element => element === document.activeElement"):
            break
    expect(field).to_be_focused()
    field.fill("Plans for the week")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator("#conversation-list .conversations .title").first).to_have_text(
        "Plans for the week"
    )

    # Export it: a file named safely, for the person to keep.
    open_menu_by_keyboard(page, "Plans for the week")
    with page.expect_download() as download:
        item(page, "Plans for the week").get_by_role("link", name="Export as Markdown").click()
    assert re.fullmatch(r"loop-\d+-plans-for-the-week\.md", download.value.suggested_filename)

    # "More": the next page, after the first, the focus on its first conversation.
    more = page.get_by_role("button", name="More conversations")
    more.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#conversation-list .conversations li")).to_have_count(PAGE_SIZE + 7)
    expect(page.get_by_role("button", name="More conversations")).to_have_count(0)
    first_new = page.locator("#conversation-list .conversations li > a").nth(PAGE_SIZE + 1)
    expect(first_new).to_have_attribute("title", f"Number {PAGE_SIZE}")
    expect(first_new).to_be_focused()
    assert titles(page)[-1] == "Travel plans"
    headings = page.locator("#conversation-list h2.group").all_inner_texts()
    assert len(headings) == len(set(headings))  # a day's group goes on under its one heading
    if violations := axe_violations(page):
        found["second page, laptop"] = violations
    page.context.close()

    # At phone size, in the drawer: archive by keyboard, then bring it back from Archived.
    page = log_in(browser, live_site, "alice", PHONE)
    page.locator(".sidebar-toggle").click()
    expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)
    open_menu_by_keyboard(page, "Number 0")
    expect(item(page, "Number 0").get_by_role("button", name="Archive")).to_be_in_viewport()
    if violations := axe_violations(page):
        found["menu open, phone"] = violations
    press_by_keyboard(page, "Number 0", "Archive")
    expect(
        page.locator("#conversation-list .title", has_text=re.compile(r"^Number 0$"))
    ).to_have_count(0)
    archived = db(lambda: Conversation.objects.get(owner=alice, title="Number 0").archived_at)
    assert archived is not None

    page.locator(".sidebar-toggle").click()
    page.get_by_role("link", name="Archived conversations").click()
    page.wait_for_url(re.compile(r".*/archived/$"))
    page.locator(".sidebar-toggle").click()
    assert titles(page) == ["Number 0"]
    open_menu_by_keyboard(page, "Number 0")
    press_by_keyboard(page, "Number 0", "Unarchive")
    expect(page.locator("#conversation-list .muted.empty")).to_have_text(
        "No archived conversations."
    )

    # Delete, once the person says yes to the question.
    page.goto(f"{live_site}/")
    page.locator(".sidebar-toggle").click()
    page.once("dialog", lambda dialog: dialog.accept())
    open_menu_by_keyboard(page, "Number 1")
    press_by_keyboard(page, "Number 1", "Delete")
    expect(
        page.locator("#conversation-list .title", has_text=re.compile(r"^Number 1$"))
    ).to_have_count(0)
    assert db(lambda: Conversation.objects.get(owner=alice, title="Number 1").deleted_at)
    page.context.close()
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
