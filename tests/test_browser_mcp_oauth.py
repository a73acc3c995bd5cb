"""Connecting an OAuth server from the Tools page in a real browser (Debian's Chromium through
Playwright), against a live daphne and worker, the real authorization server and the MCP server
it protects: Connect leads to the server's sign-in and back, under the site's
Content-Security-Policy (a form's redirect to another origin would break its form-action) with
no violation. Screenshots land in var/test-artifacts/."""

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from mcp_servers.models import CONNECTED, McpConnection
from tests.mcp_servers.harness import (  # noqa: F401 (fixtures)
    oauth_mcp_server_fixture,
    oauth_server_fixture,
)
from tests.test_browser import ARTIFACTS, PASSWORD, WAIT_MS, browser, db, site
from tests.test_browser_mcp_settings import log_in
from tests.test_web_browser_csp import watched_page

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["browser"]  # the fixture this module borrows


@pytest.fixture
def personal_site(worker_env, start_worker) -> Iterator[str]:
    personal = {
        "LOOP_MCP_PERSONAL_HOSTS": "127.0.0.1",
        "LOOP_MCP_PRIVATE_NETWORKS": "127.0.0.1/32",
    }
    with site(worker_env, start_worker, **personal) as url:
        yield url


def test_a_person_connects_an_oauth_server_in_the_browser(personal_site, oauth_mcp_server, browser):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    violations: list[str] = []
    page = watched_page(browser, violations)
    log_in(page, personal_site)
    page.goto(f"{personal_site}/settings/tools/")

    page.get_by_label("Name").fill("Notes")
    page.get_by_label("URL").fill(oauth_mcp_server.url)
    page.get_by_role("radio", name="OAuth (sign in at the server)").check()
    page.get_by_role("button", name="Add server").click()
    expect(page.locator(".notice.info")).to_contain_text("Connect Notes to sign in there")

    page.get_by_role("button", name="Connect Notes").click()
    page.wait_for_url(f"{personal_site}/settings/tools/", timeout=WAIT_MS)
    expect(page.locator(".notice").first).to_contain_text("Connected Notes.")
    expect(page.locator(".mcp-server.own .connection")).to_contain_text("Connected")
    expect(page.locator(".mcp-server.own code.name", has_text="notes__add")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "mcp-settings-oauth.png", full_page=True)
    connection = db(lambda: McpConnection.objects.get(user__username="alice"))
    assert connection.state == CONNECTED
    assert violations == []

    page.get_by_role("button", name="Disconnect Notes").click()
    expect(page.locator(".notice")).to_contain_text("Disconnected Notes")
    assert not db(McpConnection.objects.exists)
