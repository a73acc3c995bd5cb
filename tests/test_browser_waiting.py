"""Deciding on "Waiting for you" in a real browser (Debian's Chromium through Playwright) against
a live daphne and a real worker, on a site that asks before every run_code call: two runs of
conversations and two started with `manage.py runagent` (no one at their terminal, so they are
left waiting, in no conversation) are listed as the chat's cards; Approve runs a call and its run
ends with the answer, Deny ends it without running the call, each run worked by the worker; each
decision takes its call off the list and the header's count and the title's down. axe-core finds
nothing on the full list, light and dark, laptop and phone. Screenshots land in
var/test-artifacts/."""

import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from agent.models import AgentRun
from core.events import RunStatus
from core.results import ToolStatus
from tests.conftest import PROJECT_DIR, child_environment, wait_for
from tests.test_browser import (
    ARTIFACTS,
    LAPTOP,
    PASSWORD,
    PHONE,
    WAIT_MS,
    browser,  # noqa: F401 (a fixture)
    db,
    send,
    site,
)
from tests.test_browser_access import axe_violations, log_in

pytestmark = pytest.mark.django_db(transaction=True)

ASKING = {"LOOP_APPROVAL": "run_code=ask", "LOOP_USER_ACTIVE_RUNS": "4"}
WAITING_EXIT = 6  # runagent's: the run waits for a decision nobody at its terminal could give
# The mock answers each with one run_code call, then from its output (or its denial).
APPROVED_CHAT, DENIED_CHAT = "What is 17 * 23?", "What is 6 * 7?"
APPROVED_TERMINAL, DENIED_TERMINAL = "What is 9 * 9?", "What is 2 + 2?"
SAID = {
    "Approve": "Approved: the run_code call runs.",
    "Deny": "Denied: the run_code call does not run.",
}


@pytest.fixture
def asking_site(worker_env, start_worker) -> Iterator[str]:
    with site(worker_env, start_worker, **ASKING) as url:
        yield url


def started_in_terminal(worker_env: dict[str, str], task: str) -> AgentRun:
    """`manage.py runagent --user alice TASK` with no terminal to ask in: it leaves the run
    waiting and exits."""
    done = subprocess.run(
        [sys.executable, "manage.py", "runagent", "--user", "alice", task],
        cwd=PROJECT_DIR,
        env=child_environment(**worker_env, **ASKING),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == WAITING_EXIT, done.stderr
    run = db(lambda: AgentRun.objects.get(task=task))
    assert (run.status, run.conversation_id) == (RunStatus.AWAITING_APPROVAL, None)
    return run


def started_in_chat(page: Page, site_url: str, task: str) -> None:
    """A new conversation's run, once its card waits for a decision."""
    page.goto(f"{site_url}/")
    send(page, task)
    expect(page.locator(".card.approval.waiting")).to_be_visible(timeout=WAIT_MS)


def ended(task: str) -> AgentRun:
    """The run of `task`, once its worker ended it."""
    return wait_for(
        lambda: db(lambda: AgentRun.objects.filter(task=task, status=RunStatus.SUCCEEDED).first()),
        f"the run of {task!r} to end",
    )


def tool_statuses(run: AgentRun) -> list[str]:
    return db(lambda: list(run.tool_executions.values_list("status", flat=True)))


def decide(page: Page, item, button: str, left: int) -> None:
    """Press `button` on the listed call's card: it leaves the list, the counts show `left`."""
    item.get_by_role("button", name=button, exact=True).click()
    expect(item).to_have_count(0)
    expect(page.locator(".waiting-call")).to_have_count(left)
    expect(page.locator("#waiting-said")).to_contain_text(SAID[button])
    title = f"({left}) Waiting for you · Loop" if left else "Waiting for you · Loop"
    expect(page).to_have_title(title)
    if left:
        expect(page.locator("#waiting-link .count")).to_have_text(str(left))
    else:
        expect(page.locator("#waiting-link .count")).to_have_count(0)


def test_approve_and_deny_from_waiting_for_you_for_chat_and_terminal_runs(
    asking_site,
    worker_env,
    browser,  # noqa: F811
):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    page = log_in(browser, asking_site, "alice", LAPTOP)
    for task in (APPROVED_CHAT, DENIED_CHAT):
        started_in_chat(page, asking_site, task)
    terminal = [
        started_in_terminal(worker_env, task) for task in (APPROVED_TERMINAL, DENIED_TERMINAL)
    ]

    page.goto(f"{asking_site}/waiting/")
    expect(page).to_have_title("(4) Waiting for you · Loop")
    expect(page.locator("#waiting-link .count")).to_have_text("4")
    calls = page.locator(".waiting-call")
    expect(calls.locator(".card.approval.waiting")).to_have_count(4)
    expect(calls.locator("pre.highlight .nb")).to_have_count(4)  # print, highlighted
    page.screenshot(path=ARTIFACTS / "waiting-for-you.png", full_page=True)

    def listed(task: str, in_terminal: bool):
        if in_terminal:
            return calls.filter(has_text=f"A run you started in a terminal: “{task}”")
        return calls.filter(has=page.get_by_role("link", name=task, exact=True))

    decide(page, listed(APPROVED_CHAT, in_terminal=False), "Approve", 3)
    decide(page, listed(APPROVED_TERMINAL, in_terminal=True), "Approve", 2)
    item = listed(DENIED_TERMINAL, in_terminal=True)
    item.get_by_label("Why you deny it (optional)").fill("not from the terminal")
    decide(page, item, "Deny", 1)
    decide(page, listed(DENIED_CHAT, in_terminal=False), "Deny", 0)
    expect(page.locator("#waiting-summary")).to_have_text("No tool call waits for your decision.")

    # The worker took each run up: approved, the call ran and the answer came; denied, the call
    # never ran and the model answered from the denial.
    for task, answer in ((APPROVED_CHAT, "391"), (APPROVED_TERMINAL, "81")):
        run = ended(task)
        assert answer in run.answer
        assert tool_statuses(run) == [ToolStatus.OK]
    for task in (DENIED_CHAT, DENIED_TERMINAL):
        assert tool_statuses(ended(task)) == [ToolStatus.DENIED]
    assert "not from the terminal" in ended(DENIED_TERMINAL).answer
    assert {run.pk for run in terminal} == {
        ended(t).pk for t in (APPROVED_TERMINAL, DENIED_TERMINAL)
    }

    page.goto(f"{asking_site}/waiting/")
    expect(page).to_have_title("Waiting for you · Loop")


def test_axe_finds_nothing_on_a_full_waiting_for_you(
    asking_site,
    worker_env,
    browser,  # noqa: F811
):
    db(lambda: User.objects.create_user("alice", password=PASSWORD))
    started_in_terminal(worker_env, APPROVED_TERMINAL)
    page = log_in(browser, asking_site, "alice", LAPTOP)
    started_in_chat(page, asking_site, APPROVED_CHAT)
    found: dict[str, list[str]] = {}
    for scheme in ("light", "dark"):
        for view, viewport in (("laptop", LAPTOP), ("phone", PHONE)):
            page = log_in(browser, asking_site, "alice", viewport, scheme=scheme)
            page.goto(f"{asking_site}/waiting/")
            expect(page.locator(".card.approval.waiting")).to_have_count(2)
            for folded in page.locator(".waiting-call summary").all():
                folded.click()  # "Edit and approve" open
            if violations := axe_violations(page):
                found[f"{scheme} {view}"] = violations
            page.screenshot(path=ARTIFACTS / f"waiting-{scheme}-{view}.png", full_page=True)
            page.context.close()
    assert found == {}, "\n".join(f"{where}: {what}" for where, what in found.items())
