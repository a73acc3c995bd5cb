"""How runs end, in a real browser (Chromium through Playwright) against a live daphne and a real
worker: a breaker halt shows one banner saying what happened and what to do, with its answer in
words; a run stopped in the middle of a snippet shows that snippet as stopped, its one banner, and
a Continue that the page follows live to the run's end. Screenshots land in var/test-artifacts/."""

from django.contrib.auth.models import User
from playwright.sync_api import expect

from agent.models import AgentRun
from tests.test_browser import (  # noqa: F401 (browser and live_site are fixtures)
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    last_turn,
    live_site,
    logged_in,
    pytestmark,
    send,
)


def test_each_end_shows_one_banner_and_a_stopped_run_continues(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)

    send(page, "Keep reading missing.txt until it exists")
    halted = last_turn(page)
    expect(halted.locator(".card.answer.status-halted")).to_be_visible(timeout=WAIT_MS)
    expect(halted.locator(".end-banner")).to_have_count(1)
    expect(halted.locator(".card.banner")).to_have_count(0)  # no trip or halt card of its own
    expect(halted.locator(".end-banner")).to_contain_text("Halted: read_file failed 3 times")
    expect(halted.locator(".end-banner")).to_contain_text("halts it again at once")
    expect(halted.locator(".card.answer .prose")).to_contain_text(
        "I had to stop: read_file failed 3 times in a row"
    )
    page.screenshot(path=ARTIFACTS / "chat-end-breaker.png")

    send(page, "Count slowly to 4")
    counting = last_turn(page)
    expect(counting.locator(".card.tool.status-running")).to_be_visible(timeout=WAIT_MS)
    counting.get_by_role("button", name="Stop").click()
    expect(counting.locator(".card.answer.status-cancelled")).to_be_visible(timeout=WAIT_MS)
    expect(counting.locator(".end-banner")).to_have_count(1)
    expect(counting.locator(".end-banner")).to_contain_text("Stopped before it finished.")
    # A snippet the Stop cut short shows as stopped, never as an error (its card when the Stop
    # came mid-snippet: tests/test_ends.py stops a 30 s one for certain).
    expect(counting.locator(".card.tool.status-error")).to_have_count(0)
    run = db(lambda: AgentRun.objects.order_by("-pk").first())
    page.screenshot(path=ARTIFACTS / "chat-end-stopped.png")

    counting.get_by_role("button", name="Continue").click()
    counting = page.locator(f"#run-{run.pk}")
    expect(counting.locator(".card.marker")).to_have_text(
        "↻ Continued: you asked it to go on", timeout=WAIT_MS
    )
    expect(counting.locator(".card.answer.status-succeeded")).to_contain_text(
        "I counted to 4, one step a second.", timeout=WAIT_MS
    )
    expect(counting.get_by_role("button", name="Continue")).to_have_count(0)
    assert db(lambda: AgentRun.objects.get(pk=run.pk).status) == "succeeded"
