"""Editing and regenerating turns in Chromium against a live daphne and a real worker: each
makes another version of the turn, the arrows move between them, and a later task's context is its
own branch's (the mock's "Save that" saves the answer of the turn before it in the branch). Edit is
on the person's own message, reached by keyboard, and the switcher says the versions share files."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from tests.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    live_site,
    send,
)
from tests.test_browser_access import axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "textarea[name=task]"


def answers(page) -> list[str]:
    return page.locator(".turn .card.answer .prose").all_inner_texts()


def test_edit_and_regenerate_make_versions_and_each_branch_has_its_own_context(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = log_in(browser, live_site, "alice", LAPTOP)  # axe can be injected
    page.fill(TASK, "What is 17 * 23?")
    page.press(TASK, "Enter")
    first = page.locator(".turn").first
    expect(first.locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    send(page, "Save that to result.txt")
    expect(page.locator(".turn").last.locator(".card.answer")).to_contain_text(
        "I saved 391 to result.txt", timeout=WAIT_MS
    )

    # Edit the first task from the person's own message, by keyboard: it opens holding the task,
    # the cursor in it; Esc closes it as it was.
    edit = first.locator(".you summary")
    expect(edit).to_have_text("Edit your task")
    edited = first.get_by_label("The task, edited")
    edit.focus()
    page.keyboard.press("Enter")
    expect(edited).to_be_focused()
    expect(edited).to_have_value("What is 17 * 23?")
    assert axe_violations(page) == []
    first.screenshot(path=ARTIFACTS / "chat-edit-task.png")
    page.emulate_media(color_scheme="dark")
    assert axe_violations(page) == []
    page.emulate_media(color_scheme="light")
    edited.focus()
    page.keyboard.type(" Or not.")
    page.keyboard.press("Escape")
    expect(edited).to_be_hidden()
    expect(edit).to_be_focused()
    expect(first.locator(".you .task")).to_have_text("What is 17 * 23?")
    expect(page.locator(".turn")).to_have_count(2)  # nothing was sent, nothing stopped

    # Sent: a second version of that turn, shown alone with its new answer.
    page.keyboard.press("Enter")
    expect(edited).to_have_value("What is 17 * 23?")
    expect(
        edited
    ).to_be_focused()  # the editor takes focus as it opens: a busy page, a moment later
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("What is 2 * 3?")
    page.keyboard.press("Tab")  # Cancel
    page.keyboard.press("Tab")  # Send the edited task
    page.keyboard.press("Enter")
    first = page.locator(".turn").first
    expect(first.locator(".you .task")).to_have_text("What is 2 * 3?", timeout=WAIT_MS)
    expect(first.locator(".versions")).to_contain_text("2 / 2")
    # The switcher says that the versions share one workspace (an edited branch reads the
    # other's files).
    expect(first.locator(".versions")).to_contain_text(
        "Files are shared by every version of this conversation."
    )
    expect(first.locator(".card.answer")).to_contain_text("6", timeout=WAIT_MS)
    expect(page.locator(".turn")).to_have_count(1)
    send(page, "Save that to result.txt")
    expect(page.locator(".turn").last.locator(".card.answer")).to_contain_text(
        "I saved 6 to result.txt", timeout=WAIT_MS
    )

    # Back to the first version: its own branch, with what followed it.
    first.get_by_role("button", name="Show the previous version").click()
    first = page.locator(".turn").first
    expect(first.locator(".versions")).to_contain_text("1 / 2", timeout=WAIT_MS)
    expect(first.locator(".you .task")).to_have_text("What is 17 * 23?")
    expect(page.locator(".turn").last.locator(".card.answer")).to_contain_text("I saved 391")

    # Regenerate the last turn: asked again in this branch, so it saves 391 again.
    last = page.locator(".turn").last
    last.get_by_role("button", name="Regenerate").click()
    last = page.locator(".turn").last
    expect(last.locator(".versions")).to_contain_text("2 / 2", timeout=WAIT_MS)
    expect(last.locator(".card.answer")).to_contain_text("I saved 391", timeout=WAIT_MS)
    page.screenshot(path=ARTIFACTS / "chat-versions.png")
    expect(page.locator(".turn")).to_have_count(2)
    assert axe_violations(page) == []
