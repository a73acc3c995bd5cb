"""Signing in through the organisation's identity provider in a real browser (Debian's Chromium
through Playwright), against a live daphne and worker and a real OpenID Connect provider (the
certified `oidc-provider` on Node, tests/oidc_provider/): its own login and consent forms, its
codes, PKCE, signed ID tokens, refresh tokens. Screenshots land in var/test-artifacts/."""

import re
import urllib.error
import urllib.request
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Browser, Page, expect

from accounts.models import WAITING_FOR_APPROVAL
from api.keys import create_key
from api.models import ALL_SCOPES
from identity.models import ProviderIdentity
from tests.oidc_provider.harness import (  # noqa: F401 (fixtures)
    NAME,
    Provider,
    oidc_provider,
    sign_in_site,
)
from tests.test_browser import ARTIFACTS, WAIT_MS, browser, db
from tests.test_browser_access import axe_violations

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser"]  # the fixture this module borrows

ALICE = {
    "sub": "alice-0001",
    "preferred_username": "alice",
    "email": "alice@example.org",
    "groups": ["analysts", "outsiders", "staff"],
}
ALLOWED = "analysts,writers"


def new_page(browser: Browser, **options: Any) -> Page:
    """A context of its own; the provider's pages import a web font, which is not fetched."""
    context = browser.new_context(**options)
    context.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
    return context.new_page()


def through_provider(page: Page, provider: Provider, login: str) -> None:
    """From Loop's login page: the button, the provider's login form, its consent, and back."""
    page.goto(f"{provider.loop_url}/accounts/login/")
    page.get_by_role("link", name=f"Sign in with {NAME}").click()
    page.wait_for_url(f"{provider.issuer}/**", timeout=WAIT_MS)
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "whatever the provider checks")
    page.get_by_role("button", name="Sign-in").click()
    consent = page.get_by_role("button", name="Continue")
    back = re.compile(re.escape(provider.loop_url) + "/.*")
    expect(consent.or_(page.locator("body.card-page, #main"))).to_be_visible(timeout=WAIT_MS)
    if consent.is_visible():
        consent.click()
    page.wait_for_url(back, timeout=WAIT_MS)


def api_status(provider: Provider, secret: str) -> int:
    address = f"{provider.loop_url}/api/v1/conversations"
    request = urllib.request.Request(address, headers={"Authorization": f"Bearer {secret}"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_person_signs_in_through_the_provider_and_gets_only_allowed_groups(
    oidc_provider,  # noqa: F811
    sign_in_site,  # noqa: F811
    browser,
):
    oidc_provider.people(ALICE)
    with sign_in_site(LOOP_SIGNUP="open", LOOP_OIDC_GROUPS=ALLOWED):
        page = new_page(browser, bypass_csp=True)
        page.goto(f"{oidc_provider.loop_url}/accounts/login/")
        expect(page.get_by_role("link", name=f"Sign in with {NAME}")).to_be_visible()
        assert axe_violations(page) == []
        page.screenshot(path=ARTIFACTS / "identity-login.png", full_page=True)

        through_provider(page, oidc_provider, "alice-0001")
        expect(page.locator("#main")).to_be_visible()
        assert page.url == f"{oidc_provider.loop_url}/"
        expect(page.locator("form[action='/accounts/logout/']").first).to_be_attached()

    alice = db(lambda: User.objects.get(username="alice"))
    assert alice.is_active
    assert alice.email == "alice@example.org"
    assert not alice.is_staff
    assert not alice.is_superuser
    assert db(lambda: set(alice.groups.values_list("name", flat=True))) == {"analysts"}
    assert not db(lambda: Group.objects.filter(name__in=["outsiders", "staff"]).exists())
    identity = db(lambda: ProviderIdentity.objects.get(user=alice))
    assert (identity.issuer, identity.subject) == (oidc_provider.issuer, "alice-0001")
    assert identity.refresh_token.startswith("gAAAAA")  # kept sealed (Fernet), for the re-check


def test_under_approval_the_first_sign_in_waits_for_an_operator(
    oidc_provider,  # noqa: F811
    sign_in_site,  # noqa: F811
    browser,
):
    oidc_provider.people(ALICE)
    with sign_in_site(LOOP_SIGNUP="approve", LOOP_OIDC_GROUPS=ALLOWED):
        page = new_page(browser)
        through_provider(page, oidc_provider, "alice-0001")
        expect(page.locator(".alert")).to_contain_text("waiting for approval")
        assert "/accounts/login/" in page.url
    waiting = db(lambda: list(User.objects.filter(WAITING_FOR_APPROVAL)))
    assert [person.username for person in waiting] == ["alice"]


def test_a_person_the_provider_removes_loses_sessions_and_keys_and_is_refused(
    oidc_provider,  # noqa: F811
    sign_in_site,  # noqa: F811
    browser,
    manage,
    worker_env,
):
    oidc_provider.people(ALICE)
    with sign_in_site(LOOP_SIGNUP="open", LOOP_OIDC_GROUPS=ALLOWED) as url:
        page = new_page(browser)
        through_provider(page, oidc_provider, "alice-0001")
        assert page.url == f"{url}/"
        alice = db(lambda: User.objects.get(username="alice"))
        secret = db(lambda: create_key(alice, "script", ALL_SCOPES).secret)
        assert api_status(oidc_provider, secret) == 200

        env = {**worker_env, **oidc_provider.site_env()}
        checked = manage("recheck_identities", "--all", env=env)
        assert checked.returncode == 0, checked.stderr
        assert "0 removed" in checked.stdout  # still admitted: nothing changes
        page.reload()
        assert page.url == f"{url}/"

        oidc_provider.people()  # the organisation lets alice go
        checked = manage("recheck_identities", "--all", env=env)
        assert checked.returncode == 0, checked.stderr
        assert "alice: no longer admitted" in checked.stdout

        page.reload()
        page.wait_for_url(re.compile(r".*/accounts/login/.*"), timeout=WAIT_MS)
        assert api_status(oidc_provider, secret) == 401
        assert not db(lambda: User.objects.get(username="alice").is_active)
        assert db(lambda: ProviderIdentity.objects.get(user__username="alice").removed_at)

        # Back at the provider (a mistake, or a new job): Loop still refuses until an operator
        # reactivates the account.
        oidc_provider.people(ALICE)
        again = new_page(browser)
        through_provider(again, oidc_provider, "alice-0001")
        expect(again.locator(".alert")).to_contain_text("stopped admitting you")
        assert "/accounts/login/" in again.url
        again.screenshot(path=ARTIFACTS / "identity-removed.png", full_page=True)


def test_a_callback_works_once_and_a_provider_refusal_is_shown(
    oidc_provider,  # noqa: F811
    sign_in_site,  # noqa: F811
    browser,
):
    oidc_provider.people(ALICE)
    with sign_in_site(LOOP_SIGNUP="open", LOOP_OIDC_GROUPS=ALLOWED) as url:
        page = new_page(browser)
        callbacks: list[str] = []
        page.on(
            "request",
            lambda request: (
                callbacks.append(request.url) if "/oidc/callback/" in request.url else None
            ),
        )
        through_provider(page, oidc_provider, "alice-0001")
        assert page.url == f"{url}/"
        assert len(callbacks) == 1

        # The same browser, its session still signed in: the used state is gone.
        replayed = page.request.get(callbacks[0], max_redirects=0)
        assert replayed.status == 302
        assert replayed.headers["location"] == "/accounts/login/"
        # Another browser that got hold of the address.
        thief = new_page(browser)
        thief.goto(callbacks[0])
        expect(thief.locator(".alert")).to_contain_text("already used or has expired")
        thief.goto(f"{url}/")
        assert "/accounts/login/" in thief.url

        # The person cancels at the provider: it answers the callback with an error.
        other = new_page(browser)
        other.goto(f"{url}/accounts/login/")
        other.get_by_role("link", name=f"Sign in with {NAME}").click()
        other.wait_for_url(f"{oidc_provider.issuer}/**", timeout=WAIT_MS)
        other.get_by_role("link", name="[ Cancel ]").click()
        other.wait_for_url(re.compile(r".*/accounts/login/.*"), timeout=WAIT_MS)
        expect(other.locator(".alert")).to_contain_text(f"{NAME} did not sign you in")
        other.screenshot(path=ARTIFACTS / "identity-refused.png", full_page=True)


def test_a_local_account_of_the_same_name_is_never_taken_over(
    oidc_provider,  # noqa: F811
    sign_in_site,  # noqa: F811
    browser,
):
    local = db(lambda: User.objects.create_user("alice", email="alice@example.org"))
    oidc_provider.people(ALICE)
    with sign_in_site(LOOP_SIGNUP="open"):
        page = new_page(browser)
        through_provider(page, oidc_provider, "alice-0001")
        expect(page.locator(".alert")).to_contain_text("never takes over an existing account")
    assert not db(lambda: ProviderIdentity.objects.exists())
    assert db(lambda: User.objects.get(pk=local.pk).username) == "alice"
