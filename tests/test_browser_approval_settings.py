"""A person's approval settings and their "Waiting for you" list in a real browser (Debian's
Chromium through Playwright) against a live daphne and a real worker, on a site that asks before
every write_file call: the choice the site requires cannot be unchecked, the one the person
checks makes their next run's code wait, and the sidebar's count leads to the waiting call and
its conversation. Screenshots land in var/test-artifacts/."""

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from agent.models import AgentRun
from approvals.models import ApprovalPreference
from core.events import RunStatus
from tests.conftest import wait_for
from tests.test_browser import (
    ARTIFACTS,
    DEMO,
    LAPTOP,
    PASSWORD,
    browser,  # noqa: F401 (a fixture)
    db,
    logged_in,
    send,
    site,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def asking_site(worker_env, start_worker) -> Iterator[str]:
    with site(worker_env, start_worker, LOOP_APPROVAL="write_file=ask") as url:
        yield url


def test_a_person_asks_to_decide_before_code_runs_and_finds_the_call_waiting(
    asking_site,
    browser,  # noqa: F811
):
    alice = db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = logged_in(browser, asking_site, "alice", LAPTOP)
    expect(page.locator("#waiting-link .count")).to_have_count(0)

    page.get_by_role("link", name="Approvals").click()
    page.wait_for_url(f"{asking_site}/settings/approvals/")
    required = page.get_by_label("Ask me before writing files")
    expect(required).to_be_checked()
    expect(required).to_be_disabled()
    expect(page.locator(".required-by-site")).to_contain_text("The site requires it")
    required.click(force=True)  # a disabled box does not change
    expect(required).to_be_checked()

    page.get_by_label("Ask me before running code").check()
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".notice")).to_contain_text("Saved")
    expect(page.get_by_label("Ask me before running code")).to_be_checked()
    page.screenshot(path=ARTIFACTS / "approval-settings.png", full_page=True)
    stored = db(lambda: ApprovalPreference.objects.get(user=alice))
    assert (stored.ask_run_code, stored.ask_write_file) == (True, False)

    # The demo's first call is code: the worker parks the run on it, nothing run.
    page.goto(f"{asking_site}/")
    send(page, DEMO)
    run = wait_for(
        lambda: db(
            lambda: AgentRun.objects.filter(user=alice, status=RunStatus.AWAITING_APPROVAL).first()
        ),
        "the run to wait for alice's decision",
    )
    assert not db(lambda: run.tool_executions.exists())

    page.reload()
    expect(page.locator("#waiting-link .count")).to_have_text("1")
    page.locator("#sidebar").screenshot(path=ARTIFACTS / "approval-sidebar-count.png")
    page.locator("#waiting-link").click()
    page.wait_for_url(f"{asking_site}/waiting/")
    expect(page).to_have_title("(1) Waiting for you · Loop")
    call = page.locator(".waiting-call")
    expect(call).to_have_count(1)
    expect(call.locator(".tool-name")).to_have_text("run_code")
    expect(call.locator(".why")).to_have_text("You asked to decide before run_code runs.")
    expect(call.locator("pre.highlight")).to_contain_text("print(sum(range(1, 100 + 1)))")
    page.screenshot(path=ARTIFACTS / "approval-waiting.png", full_page=True)

    call.get_by_role("link", name=DEMO).click()
    page.wait_for_url(f"{asking_site}/c/{run.conversation_id}/#run-{run.pk}")
    expect(page.locator(f"#run-{run.pk}")).to_be_visible()
