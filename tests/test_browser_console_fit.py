"""The console at a laptop's 1280 x 800 in a real browser (Debian's Chromium through Playwright)
against a live daphne: the runs list shows tokens, duration and start, and the MCP servers list
health and held tools, each column whole within the window with nothing to scroll sideways; the
rest of a run's columns are a click away; a failed run's error is read without unfolding
anything, on its page and, its first line, in the list. axe-core finds nothing on those pages,
light and dark. Screenshots land in var/test-artifacts/."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from agent.models import AgentRun
from agent.runs import start_run
from core.events import HaltReason, RunStatus
from mcp_servers.models import McpServer, McpTool
from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    PHONE,
    browser,  # noqa: F401 (a fixture)
    db,
    live_site,  # noqa: F401 (a fixture)
)
from tests.test_browser_access import axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

ERROR = (
    "The model server did not answer: connection refused by 10.0.0.7:8000 after 3 tries\n"
    "Traceback (most recent call last):\n  File ...\nConnectionRefusedError"
)
# The widest values a row carries on a busy site: a long name, model, task and number.
LONG_NAME = "margaret.hamilton-engineering"
LONG_MODEL = "groq:meta-llama/llama-4-maverick-17b-128e-instruct"


def runs_of_every_kind(owner: User) -> AgentRun:
    """Runs ended every way, with the widest values; returns the failed one."""
    now = timezone.now()
    ends = [
        (RunStatus.SUCCEEDED, "", ""),
        (RunStatus.HALTED, HaltReason.NO_DECISION, ""),
        (RunStatus.FAILED, "", ERROR),
    ]
    for status, halt_reason, error in ends:
        run = start_run(owner, "Compute the sum of 1..100 and save it to a file " * 4, model="mock")
        AgentRun.objects.filter(pk=run.pk).update(
            status=status,
            halt_reason=halt_reason,
            error=error,
            model=LONG_MODEL,
            iterations=12,
            tool_calls=140,
            prompt_tokens=1_234_567,
            completion_tokens=89_012,
            started_at=now - timedelta(minutes=12),
            finished_at=now,
        )
    return AgentRun.objects.get(status=RunStatus.FAILED)


def servers_with_held_tools() -> None:
    now = timezone.now()
    for n, error in enumerate(("", "connection refused by the server at its address")):
        server = McpServer.objects.create(
            name=f"Order lookup and returns service {n}",
            prefix=f"shop{n}",
            url=f"https://tools.internal.example.com/mcp/v2/shop-{n}/endpoint",
            everyone=True,
            discovered_at=now,
            last_error=error,
        )
        McpTool.objects.create(
            server=server,
            name="lookup_order",
            exposed_name=f"shop{n}__lookup_order",
            digest="a" * 64,
            pinned_at=now,
            held_digest="b" * 64,
            held_at=now,
        )


def inside_the_window(page: Page, selector: str) -> None:
    """Every element `selector` finds is drawn whole within the window's width."""
    boxes = page.locator(selector).evaluate_all(
        "els => els.map(el => { const r = el.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert boxes, selector
    width = page.viewport_size["width"]
    for left, right in boxes:
        assert left >= 0, f"{selector} starts at {left}"
        assert right <= width, f"{selector} ends at {right}, past {width}"


def nothing_to_scroll_sideways(page: Page) -> None:
    """Neither the page nor the list's own box scrolls sideways."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate(
        "[...document.querySelectorAll('.results')].every(el => el.scrollWidth <= el.clientWidth)"
    )


def test_the_runs_and_servers_lists_fit_a_laptop_and_a_failed_runs_error_shows(
    live_site,  # noqa: F811
    browser,  # noqa: F811
):
    root = db(lambda: User.objects.create_superuser(LONG_NAME, "m@example.com", PASSWORD))
    failed = db(lambda: runs_of_every_kind(root))
    db(servers_with_held_tools)
    page = log_in(browser, live_site, LONG_NAME, LAPTOP)

    runs = reverse("admin:agent_agentrun_changelist")
    run_page = reverse("admin:agent_agentrun_change", args=[failed.pk])
    servers = reverse("admin:mcp_servers_mcpserver_changelist")
    page.goto(f"{live_site}{runs}")
    page.screenshot(path=ARTIFACTS / "console-runs-1280.png")
    for column in ("tokens", "duration", "started"):
        inside_the_window(page, f"th.column-{column}")
        inside_the_window(page, f"td.field-{column}")
    nothing_to_scroll_sideways(page)
    failed_row = page.locator("#result_list tr", has=page.get_by_role("link", name=str(failed.pk)))
    error = failed_row.locator(".loop-error")
    expect(error).to_be_visible()
    expect(error).to_have_text(
        "The model server did not answer: connection refused by 10.0.0.7:8000 after 3 tries"
    )
    inside_the_window(page, "td .loop-error")

    page.goto(f"{live_site}{run_page}")
    page.screenshot(path=ARTIFACTS / "console-failed-run-1280.png", full_page=True)
    expect(page.get_by_text("ConnectionRefusedError")).to_be_visible()  # the traceback's end

    page.goto(f"{live_site}{servers}")
    page.screenshot(path=ARTIFACTS / "console-servers-1280.png")
    for column in ("health", "tools_held"):
        inside_the_window(page, f"th.column-{column}")
        inside_the_window(page, f"td.field-{column}")
    nothing_to_scroll_sideways(page)

    # axe-core finds nothing on the pages made to fit, light and dark, laptop and phone.
    found: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        for view, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            page = log_in(browser, live_site, LONG_NAME, viewport, scheme=scheme)
            for path in (runs, run_page, servers):
                page.goto(f"{live_site}{path}")
                if violations := axe_violations(page):
                    found[f"{path} {scheme} {view}"] = violations
            page.context.close()
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
