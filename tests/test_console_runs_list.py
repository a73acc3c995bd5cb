"""The console's run list and a run's page as an operator reads them at a laptop's width
(console/runs.py; tests/test_browser_console_fit.py measures them in Chromium): a failed run's
error's first line under its task and its whole error unfolded on its page, the halt reason in
the status, lengths as short as they read."""

import pytest
from django.urls import reverse

from agent.models import AgentRun
from agent.runs import start_run
from console.runs import span
from core.events import HaltReason, RunStatus

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:agent_agentrun_changelist")


def ended(user, status: RunStatus, error: str = "", halt_reason: str = "") -> AgentRun:
    run = start_run(user, f"a {status} task", model="mock")
    AgentRun.objects.filter(pk=run.pk).update(status=status, error=error, halt_reason=halt_reason)
    return AgentRun.objects.get(pk=run.pk)


def test_a_failed_runs_error_shows_in_the_list_and_unfolded_on_its_page(client, operator, alice):
    failed = ended(alice, RunStatus.FAILED, "Model failed: refused\nTraceback (most recent call)")
    blank = ended(alice, RunStatus.FAILED, " \n ")  # an error of nothing but spaces says nothing
    ended(alice, RunStatus.HALTED, halt_reason=HaltReason.NO_DECISION)
    page = client.get(RUNS).content.decode()
    assert '<span class="loop-error">Model failed: refused</span>' in page
    assert page.count('class="loop-error"') == 1
    assert "no decision" in page  # the halt reason, in the status column
    assert 'class="sortable column-started"' in page  # day and time, short
    run_page = client.get(reverse("admin:agent_agentrun_change", args=[failed.pk])).text
    assert "collapse" not in run_page
    assert '<pre class="loop-text">Model failed: refused\nTraceback' in run_page
    blank_page = client.get(reverse("admin:agent_agentrun_change", args=[blank.pk])).text
    assert 'class="loop-text"' in blank_page  # spaces are kept, as the run recorded them


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.34, "340 ms"), (12.34, "12.3 s"), (725, "12 min 5 s"), (7500, "2 h 5 min")],
)
def test_a_runs_length_reads_short(seconds, said):
    assert span(seconds) == said
