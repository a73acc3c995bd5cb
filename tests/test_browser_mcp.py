"""An MCP tool call in a real browser (Chromium through Playwright) against a live daphne and a real
worker, the site's server the real MCP test server: a person sends the task, the call waits in
its card (the server, the tool and its description), they approve it, and the result shows. The
cards' screenshots land in var/screenshots/."""

import json
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Locator, expect

from mcp_servers.declared import declared, sync
from mcp_servers.discovery import discover
from mcp_servers.models import McpServer
from tests.conftest import PROJECT_DIR
from tests.mcp_servers.harness import (
    Served,
    modern_server_fixture,  # noqa: F401 (a fixture)
)
from tests.test_browser import (  # noqa: F401 (browser is a fixture)
    LAPTOP,
    PASSWORD,
    WAIT_MS,
    browser,
    db,
    last_turn,
    logged_in,
    pytestmark,
    send,
    site,
)

SCREENSHOTS = PROJECT_DIR / "var" / "screenshots"


def shot(element: Locator, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    element.screenshot(path=SCREENSHOTS / name)


@pytest.fixture
def mcp_site(settings, worker_env, start_worker, modern_server: Served) -> Iterator[str]:
    """The site with the test server as its server "Demo", discovered; its tools ask (MCP's
    default)."""
    servers = json.dumps([{"name": "Demo", "prefix": "demo", "url": modern_server.url}])
    settings.LOOP_MCP_SERVERS = servers
    db(lambda: (sync(declared()), discover(McpServer.objects.get(name="Demo"))))
    modern_server.reset()
    with site(worker_env, start_worker, LOOP_MCP_SERVERS=servers) as url:
        yield url


def test_a_person_approves_an_mcp_call_and_sees_its_result(mcp_site, modern_server, browser):  # noqa: F811
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, mcp_site, "alice", LAPTOP)
    send(page, 'Use demo__add with {"a": 2, "b": 40}')
    card = last_turn(page).locator(".card.approval.waiting")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.locator(".tool-name")).to_have_text("Demo · add")
    expect(card.locator(".mcp-description")).to_have_text("Adds two integers.")
    shot(card, "mcp-approval-waiting.png")
    card.get_by_role("button", name="Approve", exact=True).click()
    turn = last_turn(page)
    tool = turn.locator(".card.tool.status-ok")
    expect(tool).to_contain_text("42", timeout=WAIT_MS)
    expect(tool.locator(".tool-name")).to_have_text("Demo · add")
    expect(turn.locator(".card.answer")).to_be_visible(timeout=WAIT_MS)
    shot(turn, "mcp-call-approved.png")
    assert modern_server.calls() == [{"tool": "add", "arguments": {"a": 2, "b": 40}}]
