"""Sharing a conversation by link in a real browser (Debian's Chromium through Playwright) against
a live daphne and a real worker: alice runs the demo, shares it from the header's dialog with
her group and its files, copies the link; bob, in the group, opens it and sees the turns, and
downloads the file (audited); carol, not in it, is told there is no such page; a turn alice
adds later never shows; alice revokes it on Settings → Shared links and bob is refused at once.
axe-core finds no violation on the dialog, the shared page, the list or the revoked page."""

import pytest
from django.contrib.auth.models import Group, User
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from agent.runs import new_conversation, start_run
from engine.execution import execute_run
from sharing import links
from sharing.models import LinkView, SharedLink
from tests.test_browser import (
    ARTIFACTS,
    DEMO,
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,
    db,
    last_turn,
    live_site,
    send,
)
from tests.test_browser_access import AXE, axe_violations, log_in
from tests.test_web_browser_csp import watched_page

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser", "live_site"]  # the fixtures this module borrows


def people() -> None:
    team = Group.objects.create(name="team")
    for name in ("alice", "bob", "carol"):
        person = User.objects.create_user(name, password=PASSWORD)
        if name != "carol":
            person.groups.add(team)


def logged_in(browser: Browser, site: str, username: str, violations: list[str]) -> Page:
    """A person's page under the site's CSP, any violation recorded; axe-core is loaded as each
    page starts (an init script, which the CSP does not govern), not added as an inline tag."""
    page = watched_page(browser, violations)
    page.add_init_script(path=AXE)
    page.goto(f"{site}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site}/")
    return page


def test_a_conversation_shared_with_a_group_then_revoked(live_site, browser):
    db(people)
    violations: list[str] = []
    alice = logged_in(browser, live_site, "alice", violations)
    alice.context.grant_permissions(["clipboard-read", "clipboard-write"])
    alice.click(f"button[name=task][value='{DEMO}']")
    expect(last_turn(alice).locator(".card.answer")).to_contain_text("5050", timeout=WAIT_MS)

    alice.get_by_role("button", name="Share", exact=True).click()
    dialog = alice.get_by_role("dialog", name="Share this conversation")
    expect(dialog).to_be_visible()
    dialog.get_by_label("The group team").check()
    dialog.get_by_label("Include the files its runs wrote").check()
    dialog.get_by_role("button", name="Create link").click()
    field = alice.locator("#share-link-url")
    expect(field).to_be_focused()
    url = field.input_value()
    assert url.startswith(f"{live_site}/shared/")
    dialog.get_by_role("button", name="Copy link").click()
    expect(alice.locator("#share-copy-said")).to_have_text("Copied the link.")
    assert alice.evaluate("navigator.clipboard.readText()") == url
    assert axe_violations(alice) == [], "the share dialog"
    alice.screenshot(path=ARTIFACTS / "share-dialog.png")

    bob = logged_in(browser, live_site, "bob", violations)
    assert bob.goto(url).status == 200
    expect(bob.locator(".turn")).to_have_count(1)
    expect(bob.locator(".card.answer")).to_contain_text("5050")
    expect(bob.locator(".card.tool .tool-name")).to_have_text(
        ["run_code", "read_file", "write_file"]
    )
    expect(bob.locator(".shared-note")).to_contain_text("Shared by alice with the group team")
    expect(bob.locator("textarea, form.composer")).to_have_count(0)
    assert axe_violations(bob) == [], "the shared page"
    bob.screenshot(path=ARTIFACTS / "shared-page.png", full_page=True)
    bob.set_viewport_size(PHONE)
    assert bob.evaluate("document.documentElement.scrollWidth <= innerWidth"), "on a phone"
    assert axe_violations(bob) == [], "the shared page on a phone"
    bob.set_viewport_size(LAPTOP)
    with bob.expect_download() as fetched:
        bob.get_by_role("link", name="sum.txt").click()
    assert fetched.value.suggested_filename == "sum.txt"
    assert db(lambda: list(LinkView.objects.values_list("viewer__username", "file"))) == [
        ("bob", "sum.txt"),
        ("bob", ""),
    ]

    carol = logged_in(browser, live_site, "carol", violations)
    refused = carol.goto(url)
    assert refused.status == 404
    assert "5050" not in carol.content()

    send(alice, "What is 123 * 457?")  # after sharing
    expect(last_turn(alice).locator(".card.answer")).to_contain_text("56211", timeout=WAIT_MS)
    bob.goto(url)
    expect(bob.locator(".turn")).to_have_count(1)
    assert "56211" not in bob.content()

    alice.get_by_role("link", name="Shared links", exact=True).click()
    expect(alice.locator(".shared-link")).to_have_count(1)
    assert axe_violations(alice) == [], "the list of shared links"
    alice.get_by_role("button", name="Revoke the link to").click()
    expect(alice.get_by_role("status")).to_contain_text("Revoked the link")
    assert db(lambda: SharedLink.objects.get().revoked_at) is not None
    revoked = bob.goto(url)
    assert revoked.status == 410
    expect(bob.get_by_role("heading", name="This link was revoked")).to_be_visible()
    assert "5050" not in bob.content()
    assert axe_violations(bob) == [], "the revoked page"
    assert violations == []  # the dialog's script and the pages under the site's CSP


def test_an_operator_sees_and_revokes_a_link_in_the_console(live_site, browser):
    """Staff see every link with its looks, open its audit, and revoke it: its viewer is refused
    at once. axe-core finds nothing on the console's list, the link's page and the audit."""
    db(people)
    db(lambda: User.objects.create_superuser("root", "root@example.com", PASSWORD))
    alice = db(lambda: User.objects.get(username="alice"))
    conversation = db(lambda: new_conversation(alice))
    db(lambda: execute_run(start_run(alice, DEMO, model="mock", conversation=conversation)))
    token = db(lambda: links.share(alice, conversation.pk).token)
    violations: list[str] = []
    bob = logged_in(browser, live_site, "bob", violations)
    assert bob.goto(f"{live_site}/shared/{token}/").status == 200

    root = log_in(browser, live_site, "root", LAPTOP)
    root.goto(f"{live_site}{reverse('admin:sharing_sharedlink_changelist')}")
    row = root.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("alice")
    expect(row).to_contain_text("everyone signed in")
    expect(row).to_contain_text("● live")
    assert axe_violations(root) == [], "the console's list of shared links"
    row.get_by_role("link", name="1", exact=True).click()  # its looks
    expect(root.locator("#result_list tbody tr")).to_contain_text("bob")
    assert axe_violations(root) == [], "the console's audit of looks"
    root.goto(f"{live_site}{reverse('admin:sharing_sharedlink_changelist')}")
    root.locator("#result_list tbody tr th a").click()
    assert axe_violations(root) == [], "the console's page of a link"
    root.get_by_role("button", name="Revoke link").click()
    expect(root.locator(".messagelist")).to_contain_text("Revoked the link")
    assert bob.goto(f"{live_site}/shared/{token}/").status == 410
    revoker = db(lambda: SharedLink.objects.values_list("revoked_by__username", flat=True).get())
    assert revoker == "root"
    assert violations == []
