"""One way around, and the theme, in a real browser (Debian's Chromium through Playwright, against
a live daphne and worker): every page a person sees carries the same navigation, its current
place marked, at laptop and phone sizes, the phone's drawer worked by the keyboard alone; the
light/dark/system choice applies at once, outlives a reload, reaches every page and the login
page, and "system" follows the browser's own preference."""

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.test_browser import ARTIFACTS, PASSWORD, browser, db, live_site
from tests.test_browser_access import LAPTOP, PHONE, VIEWS, choose, log_in

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser", "live_site"]  # the fixtures this module borrows

# Every page a person sees with the place its navigation marks.
PAGES = {
    "/": "Chat",
    "/files/": "Files",
    "/memories/": "Memories",
    "/assistants/": "Assistants",
    "/assistants/new/": "Assistants",
    "/waiting/": "Waiting for you",
    "/accounts/data/": "My data",
    "/settings/approvals/": "Approvals",
    "/settings/instructions/": "Instructions",
    "/settings/notifications/": "Notifications",
    "/settings/tools/": "Tools",
    "/settings/shared-links/": "Shared links",
    "/settings/keys/": "API keys",
    "/accounts/password/": "Password",
    "/accounts/password/done/": "Password",
}
LIGHT_BG, DARK_BG = "rgb(247, 247, 245)", "rgb(21, 21, 23)"


def navigation(page: Page) -> list[tuple[str, str]]:
    """The navigation's links, in order: what each says and where it goes."""
    return page.locator("#sidebar .places a, #sidebar .account a").evaluate_all(
        "links => links.map(a => [a.textContent.trim().split(/\\s/)[0], a.pathname])"
    )


def marked(page: Page) -> list[str]:
    return [
        text.strip() for text in page.locator("#sidebar [aria-current=page]").all_text_contents()
    ]


def background(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.documentElement).backgroundColor")


def test_every_page_has_the_same_navigation_with_its_place_marked(live_site, browser):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    for view, viewport in VIEWS.items():
        page = log_in(browser, live_site, "alice", viewport)
        seen: dict[str, list[tuple[str, str]]] = {}
        for path, place in PAGES.items():
            page.goto(f"{live_site}{path}")
            seen[path] = navigation(page)
            assert marked(page) == [place], f"{path} {view}"
            if view == "phone":
                expect(page.locator("#sidebar")).not_to_be_in_viewport()
                expect(page.locator(".sidebar-toggle")).to_be_visible()
            else:
                expect(page.locator("#sidebar .places")).to_be_in_viewport(ratio=1)
        first = seen["/"]
        assert [text for text, _ in first] == [
            "Chat", "Files", "Memories", "Assistants", "Waiting", "My", "Approvals", "Instructions",
            "Notifications", "Tools", "Shared", "API", "Password",
        ]  # fmt: skip
        assert {path: links for path, links in seen.items() if links != first} == {}, view
        page.screenshot(path=ARTIFACTS / f"nav-{view}.png")
        page.context.close()


def test_the_phone_drawer_is_worked_by_the_keyboard_on_every_page(live_site, browser):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = log_in(browser, live_site, "alice", PHONE)
    sidebar = page.locator("#sidebar")
    for path, place in PAGES.items():
        if place == "Chat":
            continue
        page.goto(f"{live_site}{path}")
        # Closed, the drawer's links are out of Tab's way: the skip link, then the menu.
        page.locator(".skip-link").focus()  # the page's first stop, whatever has autofocus
        page.keyboard.press("Tab")
        expect(page.locator(".sidebar-toggle")).to_be_focused()
        page.keyboard.press("Enter")
        expect(sidebar).to_be_in_viewport(ratio=1)
        expect(sidebar.locator(":focus")).to_have_count(1)
        page.keyboard.press("Escape")
        expect(sidebar).not_to_be_in_viewport()
        expect(page.locator(".sidebar-toggle")).to_be_focused()
        # Open again, Tab walks the drawer's links to the chat, and Enter goes there.
        page.keyboard.press("Enter")
        for _ in range(20):
            if page.evaluate("document.activeElement.textContent.trim()") == "Chat":
                break
            page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_url(f"{live_site}/")
        expect(page.locator("#sidebar [aria-current=page]")).to_have_text("Chat")


def test_the_theme_follows_the_system_until_chosen_and_the_choice_stays(live_site, browser):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    for view, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
        page = log_in(browser, live_site, "alice", viewport, scheme="light")
        page.goto(f"{live_site}/memories/")
        assert background(page) == LIGHT_BG
        page.emulate_media(color_scheme="dark")
        assert background(page) == DARK_BG  # "system" until chosen
        page.emulate_media(color_scheme="light")

        page.fill("#memory-q", "half-typed")
        choose(page, "Dark")
        assert background(page) == DARK_BG
        expect(page.locator("#memory-q")).to_have_value("half-typed")  # switched in place
        page.emulate_media(color_scheme="light")
        assert background(page) == DARK_BG  # chosen: the system no longer decides
        page.reload()
        assert background(page) == DARK_BG
        for path in ("/", "/files/", "/settings/tools/", "/accounts/password/"):
            page.goto(f"{live_site}{path}")
            assert background(page) == DARK_BG, path
            pressed = page.locator(".theme-choice [aria-pressed=true]")
            expect(pressed).to_have_text("Dark")  # in the drawer, on a phone

        choose(page, "Light")
        page.emulate_media(color_scheme="dark")
        assert background(page) == LIGHT_BG
        page.reload()
        assert background(page) == LIGHT_BG

        choose(page, "System")
        assert background(page) == DARK_BG
        page.emulate_media(color_scheme="light")
        assert background(page) == LIGHT_BG
        page.reload()
        page.emulate_media(color_scheme="dark")
        assert background(page) == DARK_BG

        # The login page is drawn in the choice too, once the person has logged out.
        page.emulate_media(color_scheme="light")
        choose(page, "Dark")
        if page.locator(".sidebar-toggle").is_visible():
            page.locator(".sidebar-toggle").click()
        page.get_by_role("button", name="Log out").click()
        page.goto(f"{live_site}/accounts/login/")
        assert background(page) == DARK_BG, view
        page.context.close()


def test_without_its_script_the_theme_form_still_chooses(live_site, browser):
    """The choice is a form: with no script (blocked, or not yet loaded) it posts and comes back."""
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = log_in(browser, live_site, "alice", LAPTOP)
    page.route(re.compile(r".*/theme\.js$"), lambda route: route.abort())
    page.goto(f"{live_site}/settings/approvals/")
    page.get_by_role("button", name="Dark", exact=True).click()
    page.wait_for_url(f"{live_site}/settings/approvals/")
    expect(page.get_by_role("button", name="Dark", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    assert background(page) == DARK_BG
