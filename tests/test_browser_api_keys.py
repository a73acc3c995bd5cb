"""The API keys page in a real browser (Debian's Chromium through Playwright) against a live
daphne: a person finds it in the navigation, makes a key with the keyboard, copies it with the
Copy button (a static script, under the site's Content-Security-Policy with no violation),
sees it gone after a reload, and revokes it through its confirmation; axe-core finds no
violation on the page (with the new key shown, and the list) nor on the console's key pages,
on a laptop and a phone, and nothing is wider than a phone's screen."""

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import expect

from api.keys import create_key
from api.models import ApiKey
from tests.test_browser import ARTIFACTS, LAPTOP, PASSWORD, PHONE, browser, db, live_site
from tests.test_browser_access import axe_violations
from tests.test_browser_mcp_settings import log_in
from tests.test_web_browser_csp import watched_page

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser", "live_site"]  # the fixtures this module borrows


def test_a_person_makes_copies_and_revokes_a_key(live_site, browser):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    violations: list[str] = []
    page = watched_page(browser, violations)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page, live_site)

    page.get_by_role("link", name="API keys").click()
    page.wait_for_url(f"{live_site}/settings/keys/")
    page.get_by_label("Name", exact=True).fill("my script")
    page.get_by_label("decide", exact=False).check()
    page.get_by_label("In 90 days").check()
    page.get_by_label("Name", exact=True).press("Enter")  # the form sent from the keyboard

    secret_field = page.locator("#new-key-secret")
    expect(secret_field).to_be_visible()
    secret = secret_field.input_value()
    assert secret.startswith("loop_")
    page.get_by_role("button", name="Copy key").click()
    expect(page.locator("#copy-said")).to_have_text("Copied the key.")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    page.screenshot(path=ARTIFACTS / "api-keys-new.png", full_page=True)

    page.goto(f"{live_site}/settings/keys/")
    assert secret not in page.content()
    expect(page.locator("#new-key-secret")).to_have_count(0)
    page.get_by_text("Revoke…").click()
    page.get_by_role("button", name="Revoke my script").click()
    expect(page.get_by_text("■ revoked")).to_be_visible()
    key = db(lambda: ApiKey.objects.get(owner=alice))
    assert (key.state, sorted(key.scopes)) == ("revoked", ["decide", "read", "run"])
    assert violations == []

    db(lambda: create_key(alice, "a live one"))
    db(lambda: User.objects.create_superuser("root", "root@example.com", PASSWORD))
    checked = browser.new_context(viewport=LAPTOP, bypass_csp=True).new_page()
    log_in(checked, live_site)
    operator = browser.new_context(viewport=LAPTOP, bypass_csp=True).new_page()
    operator.goto(f"{live_site}/admin/login/")
    operator.fill("input[name=username]", "root")
    operator.fill("input[name=password]", PASSWORD)
    operator.click("input[type=submit]")
    console = [
        reverse("admin:api_apikey_changelist"),
        reverse("admin:api_apikey_change", args=[key.pk]),
    ]
    for viewport in (LAPTOP, PHONE):
        checked.set_viewport_size(viewport)
        checked.goto(f"{live_site}/settings/keys/")
        checked.get_by_label("Name", exact=True).fill("checked")
        checked.get_by_role("button", name="Make key").click()
        expect(checked.locator("#new-key-secret")).to_be_visible()  # shown once: axe reads it
        for state in ("with the new key", "the list"):
            assert axe_violations(checked) == [], state
            assert checked.evaluate("document.documentElement.scrollWidth <= innerWidth"), state
            checked.goto(f"{live_site}/settings/keys/")
        operator.set_viewport_size(viewport)
        for path in console:
            operator.goto(f"{live_site}{path}")
            assert axe_violations(operator) == [], path
    checked.set_viewport_size(PHONE)
    checked.screenshot(path=ARTIFACTS / "api-keys-phone.png", full_page=True)
