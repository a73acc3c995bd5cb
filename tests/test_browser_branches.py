"""Editing and regenerating turns in Chromium against a live daphne and a real worker: each
makes another version of the turn, the arrows move between them, and a later task's context is its
own branch's (the mock's "Save that" saves the answer of the turn before it in the branch)."""

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
    logged_in,
    send,
)

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "textarea[name=task]"


def answers(page) -> list[str]:
    return page.locator(".turn .card.answer .prose").all_inner_texts()


def test_edit_and_regenerate_make_versions_and_each_branch_has_its_own_context(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)
    page.fill(TASK, "What is 17 * 23?")
    page.press(TASK, "Enter")
    first = page.locator(".turn").first
    expect(first.locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    send(page, "Save that to result.txt")
    expect(page.locator(".turn").last.locator(".card.answer")).to_contain_text(
        "I saved 391 to result.txt", timeout=WAIT_MS
    )

    # Edit the first task: a second version of that turn, shown alone with its new answer.
    first.get_by_text("Edit the task").click()
    first.get_by_label("The task, edited").fill("What is 2 * 3?")
    first.get_by_role("button", name="Send the edited task").click()
    first = page.locator(".turn").first
    expect(first.locator(".you .task")).to_have_text("What is 2 * 3?", timeout=WAIT_MS)
    expect(first.locator(".versions")).to_contain_text("2 / 2")
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
