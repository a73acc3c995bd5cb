"""What a tool's card shows in a real browser (Chromium through Playwright), live over the socket
and once reloaded, against a live daphne and a real worker: a snippet's output itself (its
stdout; its stderr and exit status only when there are some), an MCP answer without the
envelope the model reads around it, and what the model read behind a disclosure. The cards'
screenshots land in var/screenshots/."""

from django.contrib.auth.models import User
from playwright.sync_api import Locator, Page, expect

from tests.mcp_servers.harness import modern_server_fixture  # noqa: F401 (a fixture)
from tests.test_browser import (  # noqa: F401 (browser, live_site: fixtures)
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
from tests.test_browser_access import VIEWS, axe_violations, log_in
from tests.test_browser_mcp import mcp_site, shot  # noqa: F401 (a fixture)


def visible_text(card: Locator) -> str:
    """What the card shows: innerText leaves out what a closed disclosure holds."""
    return card.evaluate("card => card.innerText")


def both_ways(page: Page, check) -> None:
    """`check` the last turn as it came live over the socket, then as a reload draws it."""
    check(last_turn(page))
    page.reload()
    check(last_turn(page))


def the_raw_text_is_behind_a_disclosure(card: Locator, *model_read: str) -> None:
    raw = card.locator("details.raw-output")
    expect(raw.locator("summary")).to_have_text("What the assistant read")
    expect(raw.locator("pre")).to_be_hidden()
    raw.locator("summary").click()
    for text in model_read:
        expect(raw.locator("pre")).to_contain_text(text)
    raw.locator("summary").click()


def test_a_snippets_card_shows_its_output_not_its_report(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)

    send(page, "Sum of 1..100")

    def stdout_alone(turn: Locator) -> None:
        expect(turn.locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)
        card = turn.locator(".card.tool.status-ok")
        expect(card.locator("pre.output")).to_have_text("5050")
        shown = visible_text(card)
        for report in ("exit status", "Exit status", "--- stdout ---", "--- stderr ---", "(empty)"):
            assert report not in shown, shown
        expect(card.locator(".stderr")).to_have_count(0)
        the_raw_text_is_behind_a_disclosure(card, "exit status: 0", "--- stdout ---\n5050")

    both_ways(page, stdout_alone)
    shot(last_turn(page), "card-stdout.png")

    send(page, "What is 1 / 0?")

    def stderr_and_exit(turn: Locator) -> None:
        expect(turn.locator(".card.answer")).to_contain_text(
            "I could not compute 1 / 0: ZeroDivisionError: division by zero.", timeout=WAIT_MS
        )
        card = turn.locator(".card.tool.status-error")
        expect(card.locator(".exit-status")).to_have_text("Exit status 1")
        expect(card.locator(".output-label")).to_contain_text("stderr")
        expect(card.locator("pre.stderr")).to_contain_text("ZeroDivisionError: division by zero")
        expect(card.locator("pre.output:not(.stderr)")).to_have_count(0)  # no stdout, no box
        shown = visible_text(card)
        assert "--- stdout ---" not in shown, shown
        assert "(empty)" not in shown, shown
        the_raw_text_is_behind_a_disclosure(card, "exit status: 1", "--- stderr ---")
        expect(turn.locator(".card.answer")).not_to_contain_text("--- stdout ---")

    both_ways(page, stderr_and_exit)
    shot(last_turn(page), "card-stderr.png")
    no_violations(browser, live_site, page.url)


def no_violations(browser, site: str, url: str) -> None:  # noqa: F811
    """axe finds nothing on the cards, their disclosures open, light and dark, laptop and phone."""
    for scheme in ("light", "dark"):
        for viewport in VIEWS.values():
            page = log_in(browser, site, "alice", viewport, scheme=scheme)
            page.goto(url)
            for summary in page.locator("details.raw-output summary").all():
                summary.click()
            assert axe_violations(page) == [], (scheme, viewport)
            page.context.close()


def test_an_mcp_card_and_answer_show_the_servers_words_without_the_envelope(mcp_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, mcp_site, "alice", LAPTOP)
    send(page, 'Use demo__add with {"a": 2, "b": 40}')
    waiting = last_turn(page).locator(".card.approval.waiting")
    waiting.get_by_role("button", name="Approve", exact=True).click()

    def the_answer_alone(turn: Locator) -> None:
        card = turn.locator(".card.tool.status-ok")
        expect(card.locator("pre.output")).to_have_text("42", timeout=WAIT_MS)
        expect(turn.locator(".card.answer .prose")).to_have_text("42", timeout=WAIT_MS)
        for shown in (visible_text(card), visible_text(turn.locator(".card.answer"))):
            assert "<<<" not in shown, shown
            assert "untrusted text" not in shown, shown
        the_raw_text_is_behind_a_disclosure(card, "<<<mcp result>>>", "untrusted text")

    both_ways(page, the_answer_alone)
    shot(last_turn(page), "card-mcp.png")


def test_the_demo_models_help_is_not_shown_as_done(live_site, browser):  # noqa: F811
    """A task the demo model cannot do ends with its help: no success's tick, plain words."""
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, live_site, "alice", LAPTOP)
    send(page, "Write a poem about the sea")

    def not_done(turn: Locator) -> None:
        answer = turn.locator(".card.answer")
        expect(answer.locator("header")).to_have_text("∅ Loop Not done", timeout=WAIT_MS)
        expect(answer.locator(".end-banner")).to_contain_text(
            "Not done: this site's demo model cannot do this task."
        )
        expect(answer.locator(".prose")).to_contain_text("This site runs a demo model")
        expect(answer).not_to_contain_text("GROQ_API_KEY")

    both_ways(page, not_done)
    shot(last_turn(page), "card-not-done.png")
    no_violations(browser, live_site, page.url)
