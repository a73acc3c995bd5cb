"""Findability, the phone and accessibility in a real browser (Debian's Chromium through
Playwright), against a live daphne and a real worker: the phone drawer and each way to close it
(a tap on its backdrop never reaching the page beneath), the keyboard shortcuts and their help,
the skip link, the sidebar's search and date groups, the quota asked again when a run ends, and
axe-core (tests/vendor/axe.min.js, MPL-2.0) on every page, light and dark, laptop and phone.
Screenshots of the drawer and the sidebar land in var/test-artifacts/ (docs/images/ with
LOOP_DOC_IMAGES=1)."""

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from agent.models import AgentRun, Conversation
from agent.runs import new_conversation, start_run
from core.events import RunStatus
from memory.models import Memory
from tests.doc_images import doc_image
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM_ARGS,  # noqa: F401 (the launch flags the browser fixture uses)
    DEMO,
    PASSWORD,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    last_turn,
    live_site,  # noqa: F401 (a fixture)
    send,
)

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
LAPTOP = {"width": 1366, "height": 850}
PHONE = {"width": 390, "height": 844}
VIEWS = {"laptop": LAPTOP, "phone": PHONE}


def log_in(
    browser: Browser,  # noqa: F811
    site: str,
    username: str,
    viewport: dict[str, int],
    *,
    scheme: str = "light",
    touch: bool = False,
) -> Page:
    """A person logged in, in a context of their own. CSP is bypassed only so that axe can be
    injected; the page's own scripts are the site's files either way."""
    context = browser.new_context(
        viewport=viewport, color_scheme=scheme, has_touch=touch, bypass_csp=True
    )
    page = context.new_page()
    page.goto(f"{site}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/$"))
    return page


def choose(page: Page, theme: str) -> None:
    """The person presses one of the theme's choices, from the drawer on a phone."""
    toggle = page.locator(".sidebar-toggle")
    if toggle.is_visible():
        toggle.click()
    page.get_by_role("group", name="Theme").get_by_role("button", name=theme).click()
    expect(
        page.get_by_role("group", name="Theme").get_by_role("button", name=theme)
    ).to_have_attribute("aria-pressed", "true")
    if toggle.is_visible() and toggle.get_attribute("aria-expanded") == "true":
        page.keyboard.press("Escape")


def past_conversation(user: User, title: str, task: str, days_ago: int) -> None:
    """A conversation last used `days_ago` days ago, its one run ended."""
    conversation = new_conversation(user)
    run = start_run(user, task, model="mock", conversation=conversation)
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    when = timezone.now() - timedelta(days=days_ago)
    Conversation.objects.filter(pk=conversation.pk).update(title=title, updated_at=when)


def toggle_is_on_top(page: Page) -> bool:
    """Whether the drawer's ☰/✕ button is what a tap at its middle would press."""
    return page.locator(".sidebar-toggle").evaluate(
        """button => { const box = button.getBoundingClientRect();
          const hit = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
          return button.contains(hit); }"""
    )


def test_the_phone_drawer_closes_every_way_and_a_tap_beside_it_starts_nothing(
    live_site,  # noqa: F811
    browser,  # noqa: F811
):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    db(lambda: past_conversation(alice, "Travel plans", "My favourite city is Lisbon", 0))
    page = log_in(browser, live_site, "alice", PHONE, touch=True)
    page.goto(f"{live_site}/")  # a new conversation: the suggestions fill the page
    drawer, toggle = page.locator("#sidebar"), page.locator(".sidebar-toggle")
    expect(drawer).not_to_be_in_viewport()

    # A suggestion that reaches beside the drawer: a tap there would start it.
    spot = page.locator("#suggestions button").evaluate_all(
        """buttons => { for (const b of buttons) { const r = b.getBoundingClientRect();
            const x = Math.min(r.right - 4, innerWidth - 4);
            if (r.right > 0.8 * innerWidth) return [x, r.y + r.height / 2]; }
          return null; }"""
    )
    assert spot is not None
    beneath = page.evaluate("([x, y]) => document.elementFromPoint(x, y).name", spot)
    assert beneath == "task"

    # Its button opens it and, above the drawer, closes it.
    toggle.click()
    expect(drawer).to_be_in_viewport(ratio=1)
    expect(toggle).to_have_attribute("aria-expanded", "true")
    assert toggle_is_on_top(page)
    # What it covers is out of the keyboard's reach while it is open.
    assert page.evaluate(
        "document.getElementById('timeline').inert && document.getElementById('task-form').inert"
    )
    page.screenshot(path=doc_image("drawer-phone.png"), scale="css")
    toggle.click()
    expect(drawer).not_to_be_in_viewport()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    assert not page.evaluate("document.getElementById('task-form').inert")

    # Esc closes it, and the focus goes back to its button.
    toggle.click()
    expect(drawer).to_be_in_viewport(ratio=1)
    page.keyboard.press("Escape")
    expect(drawer).not_to_be_in_viewport()
    expect(toggle).to_be_focused()

    # A tap on the backdrop beside it closes it and goes no further.
    toggle.click()
    expect(drawer).to_be_in_viewport(ratio=1)
    page.touchscreen.tap(*spot)
    expect(drawer).not_to_be_in_viewport()
    page.wait_for_timeout(500)  # a task sent would have navigated by now
    assert page.url == f"{live_site}/"
    assert db(lambda: Conversation.objects.count()) == 1
    expect(page.locator("#suggestions")).to_be_visible()

    # Going to a conversation from it: the page arrives with the drawer closed, and so does the
    # one the back button brings back.
    toggle.click()
    drawer.get_by_role("link", name="Travel plans").click()
    page.wait_for_url(re.compile(r".*/c/\d+/$"))
    expect(page.locator("h1.title")).to_have_text("Travel plans")
    expect(drawer).not_to_be_in_viewport()
    page.go_back()
    page.wait_for_url(f"{live_site}/")
    expect(drawer).not_to_be_in_viewport()
    expect(page.locator(".sidebar-toggle")).to_have_attribute("aria-expanded", "false")


def test_shortcuts_their_help_and_the_skip_link(live_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    db(lambda: past_conversation(alice, "Lisbon", "My favourite city is Lisbon", 0))
    db(lambda: past_conversation(alice, "Sums", "What is 17 * 23?", 0))
    page = log_in(browser, live_site, "alice", LAPTOP)

    # The help: its button and the ? key, each showing the list; Esc hides it.
    help_list = page.locator("#shortcuts")
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(help_list).to_be_visible()
    expect(help_list).to_contain_text("New conversation")
    page.keyboard.press("Escape")
    expect(help_list).to_be_hidden()
    page.locator("h1.title").click()  # out of the composer, where ? is a character
    page.keyboard.press("?")
    expect(help_list).to_be_visible()
    page.keyboard.press("?")
    expect(help_list).to_be_hidden()

    # / and Ctrl+K put the cursor in the search; typing filters the list.
    page.keyboard.press("/")
    search = page.locator("#conversation-search")
    expect(search).to_be_focused()
    search.fill("lisbon")
    expect(page.locator(".conversations .title")).to_have_text(["Lisbon"])
    page.locator("#task").focus()
    page.keyboard.press("Control+k")
    expect(search).to_be_focused()

    # Ctrl+Shift+O: a new conversation, from anywhere, the composer included.
    page.locator(".conversations a").first.click()
    page.wait_for_url(re.compile(r".*/c/\d+/$"))
    page.locator("#task").focus()
    page.keyboard.press("Control+Shift+O")
    page.wait_for_url(f"{live_site}/")
    expect(page.locator("h1.title")).to_have_text("New conversation")

    # Esc while a run goes stops it.
    page.fill("#task", "Count slowly to 30")
    page.press("#task", "Enter")
    page.wait_for_url(re.compile(r".*/c/\d+/$"))
    expect(page.locator(".run-status .live")).to_be_visible(timeout=WAIT_MS)
    page.keyboard.press("Escape")
    expect(page.locator(".run-status .live")).to_have_count(0, timeout=WAIT_MS)
    run = db(lambda: AgentRun.objects.get(task="Count slowly to 30"))
    assert run.status == RunStatus.CANCELLED

    # The skip link: the first Tab stop of a page, taking the focus to its main content.
    page.goto(f"{live_site}/files/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to the main content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()


def test_search_date_groups_full_titles_and_a_fresh_quota(live_site, browser):  # noqa: F811
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    long_title = "What is my favourite city, asked once more to be sure of it"
    for title, task, days_ago in [
        ("Old notes", "Summarise my notes", 40),
        ("Weekly plan", "Plan the week", 3),
        (long_title, "What is my favourite city?", 1),
    ]:
        db(lambda t=title, k=task, d=days_ago: past_conversation(alice, t, k, d))
    page = log_in(browser, live_site, "alice", LAPTOP)
    expect(page.locator(".conversation-list h2.group")).to_have_text(
        ["Yesterday", "Last 7 days", "Older"]
    )
    link = page.locator(".conversations a", has_text="What is my favourite")
    expect(link).to_have_attribute("title", long_title)

    # A run that writes a file: the sidebar's quota counts it once the run has ended.
    quota = page.locator("#quota")
    expect(quota).to_contain_text("0\xa0bytes of 200\xa0MB")
    page.click(f"button[name=task][value='{DEMO}']")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)
    expect(quota).not_to_contain_text("0\xa0bytes of", timeout=WAIT_MS)
    expect(quota).to_contain_text(re.compile(r"\d+\xa0bytes of 200\xa0MB"))
    expect(page.locator(".conversation-list h2.group")).to_have_text(
        ["Today", "Yesterday", "Last 7 days", "Older"]
    )

    # The title never shrinks to a letter: the header gives it room at 1366 px.
    title_width = page.locator("h1.title").evaluate("h1 => h1.getBoundingClientRect().width")
    assert title_width > 200

    # Search by a word of a task, not of any title.
    page.locator("#conversation-search").fill("week")
    expect(page.locator(".conversations .title")).to_have_text(["Weekly plan"])
    page.locator("#conversation-search").fill("favourite")
    expect(page.locator(".conversations .title")).to_have_text([long_title])
    page.locator("#conversation-search").fill("")
    expect(page.locator(".conversations .title")).to_have_count(4)
    page.locator("#sidebar").screenshot(path=doc_image("sidebar-groups.png"), scale="css")
    page.locator("#conversation-search").fill("plan")
    expect(page.locator(".conversations .title")).to_have_count(1)

    # My data's checkbox sits on its label's line, just before it, and the label ticks it.
    page.goto(f"{live_site}/accounts/data/")
    box = page.locator("#understood").bounding_box()
    label = page.locator("label[for=understood]").bounding_box()
    assert box is not None
    assert label is not None
    assert abs((box["y"] + box["height"] / 2) - (label["y"] + label["height"] / 2)) < 4
    assert 0 <= label["x"] - (box["x"] + box["width"]) < 16
    page.locator("label[for=understood]").click()
    expect(page.locator("#understood")).to_be_checked()


def axe_violations(page: Page) -> list[str]:
    """axe-core's violations on the page as it stands, one line each: rule, help, where."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=AXE)
    return page.evaluate(
        """async () => {
          const result = await axe.run(document, {resultTypes: ["violations"]});
          return result.violations.map(v => `${v.id} (${v.impact}): ${v.help} at ` +
            v.nodes.slice(0, 4).map(n => n.target.join(" ")).join(" | "));
        }"""
    )


def chat_with_several_turns(page: Page, site: str) -> str:
    """A conversation of three runs: tool cards, a file written, a memory, an answer."""
    page.goto(f"{site}/")
    page.click(f"button[name=task][value='{DEMO}']")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)
    send(page, "Remember that my favourite colour is teal")
    expect(last_turn(page).locator(".card.answer")).to_be_visible(timeout=WAIT_MS)
    send(page, "What is 17 * 23?")
    expect(last_turn(page).locator(".card.answer")).to_contain_text("391", timeout=WAIT_MS)
    return page.url


def console_pages(run: AgentRun) -> list[str]:
    """The console's pages an operator reads: its front page, each list, a run, a memory, a
    person."""
    memory = Memory.objects.order_by("pk").first()
    assert memory is not None
    return [
        "/admin/",
        reverse("admin:memory_memory_change", args=[memory.pk]),
        reverse("admin:memory_forgottenmemory_changelist"),
        reverse("admin:auth_user_change", args=[run.user_id]),
        reverse("admin:auth_group_changelist"),
        reverse("admin:auth_group_add"),
        reverse("admin:agent_agentrun_changelist"),
        reverse("admin:agent_agentrun_change", args=[run.pk]),
        reverse("admin:agent_agentrun_usage"),
        reverse("admin:agent_agentrun_storage"),
        reverse("admin:agent_breakertrip_changelist"),
        reverse("admin:agent_toolexecution_changelist"),
        reverse("admin:memory_memory_changelist"),
        reverse("admin:auth_user_changelist"),
        reverse("admin:accounts_signup_changelist"),
        reverse("admin:approvals_approvalrequest_changelist"),
        reverse("admin:approvals_sitetoolpolicy_changelist"),
        reverse("admin:approvals_sitetoolpolicy_add"),
        reverse("admin:approvals_toolgrant_changelist"),
        reverse("admin:api_apikey_changelist"),
    ]


def open_parts(page: Page, conversation: str, how: str) -> dict[str, list[str]]:
    """axe's violations with the chat page's folded parts open: the help, the conversation's
    menu, and on a phone the drawer."""
    found: dict[str, list[str]] = {}
    page.goto(conversation)
    page.get_by_role("button", name="Keyboard shortcuts").click()
    if violations := axe_violations(page):
        found[f"{conversation} help {how}"] = violations
    page.keyboard.press("Escape")
    page.locator("summary[aria-label='Conversation actions']").click()
    if violations := axe_violations(page):
        found[f"{conversation} menu {how}"] = violations
    page.keyboard.press("Escape")
    if page.locator(".sidebar-toggle").is_visible():
        page.locator(".sidebar-toggle").click()
        expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)
        if violations := axe_violations(page):
            found[f"{conversation} drawer {how}"] = violations
    return found


def open_drawer(page: Page, url: str, how: str) -> dict[str, list[str]]:
    """axe's violations on a page other than the chat with its drawer open, on a phone."""
    page.goto(url)
    if not page.locator(".sidebar-toggle").is_visible():
        return {}
    page.locator(".sidebar-toggle").click()
    expect(page.locator("#sidebar")).to_be_in_viewport(ratio=1)
    violations = axe_violations(page)
    return {f"{url} drawer {how}": violations} if violations else {}


def test_axe_finds_no_violation_on_any_page(live_site, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    db(lambda: User.objects.create_superuser("root", "root@example.com", PASSWORD))
    db(lambda: User.objects.create_user("newcomer", password=PASSWORD, is_active=False))
    page = log_in(browser, live_site, "alice", LAPTOP)
    conversation = chat_with_several_turns(page, live_site)
    run = db(lambda: AgentRun.objects.order_by("pk").first())
    people = [
        conversation,
        f"{live_site}/",
        f"{live_site}/files/",
        f"{live_site}/files/view/sum.txt",
        f"{live_site}/memories/",
        f"{live_site}/accounts/data/",
        f"{live_site}/accounts/password/",
        f"{live_site}/settings/approvals/",
        f"{live_site}/settings/tools/",
        f"{live_site}/settings/keys/",
        f"{live_site}/accounts/password/done/",
        f"{live_site}/waiting/",
    ]
    operators = [f"{live_site}{path}" for path in db(lambda: console_pages(run))]
    found: dict[str, list[str]] = {}
    # Light and dark as the system says, and as the person chose against it with the toggle.
    for scheme, chosen in (("light", None), ("dark", None), ("light", "Dark"), ("dark", "Light")):
        for view, viewport in VIEWS.items():
            for username, urls in (("alice", people), ("root", operators)):
                if chosen and username == "root":
                    continue  # the console has no toggle: it follows the system
                page = log_in(browser, live_site, username, viewport, scheme=scheme)
                how = f"{scheme}{f' chosen {chosen}' if chosen else ''} {view}"
                if chosen:
                    choose(page, chosen)
                for url in urls:
                    page.goto(url)
                    if violations := axe_violations(page):
                        found[f"{url} {how}"] = violations
                if username == "alice":
                    found.update(open_parts(page, conversation, how))
                    found.update(open_drawer(page, f"{live_site}/memories/", how))
                page.context.close()
    anonymous = browser.new_context(viewport=PHONE, bypass_csp=True).new_page()
    for path in ("/accounts/login/", "/accounts/signup/"):
        anonymous.goto(f"{live_site}{path}")
        if violations := axe_violations(anonymous):
            found[f"{path} light phone"] = violations
    # The check checks: an image with no text, put on a page, is found.
    anonymous.evaluate("document.querySelector('main').append(document.createElement('img'))")
    assert any(line.startswith("image-alt") for line in axe_violations(anonymous))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "axe-violations.json").write_text(json.dumps(found, indent=1))
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
