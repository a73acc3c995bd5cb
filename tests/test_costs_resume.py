"""A worker killed in the middle of a model turn: another resumes the run, and every turn
recorded is charged once (the one in flight, never recorded, is not charged); the run's cost is
the sum of its recorded turns at the price table's rates. Real workers, a real HTTP model."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounting.ledger import spend_of_run
from accounting.models import Charge, Price
from agent.models import AgentRun
from agent.runs import new_conversation, submit_run
from core.events import ResumeReason, RunStatus
from tests.conftest import wait_for
from tests.groq_server import groq_server_fixture, tool_call  # noqa: F401 (the fixture)
from tests.test_worker import MODEL, STALE, model_turns, resumes, stopped

pytestmark = pytest.mark.django_db(transaction=True)

MILLION = Decimal(1_000_000)


@pytest.fixture
def on_groq(settings, groq_server, worker_env) -> dict[str, str]:
    """The fake Groq server as the model of the workers, which resume a dead one's runs soon."""
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    return {
        "GROQ_API_KEY": "gsk_test_key",
        "GROQ_BASE_URL": groq_server.base_url,
        "LOOP_GROQ_MODEL": MODEL,
        "LOOP_GROQ_MAX_RETRIES": "0",
        **STALE,
    }


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def test_a_resumed_run_charges_each_recorded_turn_once(
    alice, on_groq, groq_server, start_worker, workspaces
):
    Price.objects.create(
        model=MODEL,
        input=Decimal("0.15"),
        output=Decimal("0.6"),
        effective_from=timezone.now() - timedelta(days=1),
    )
    groq_server.reply(tool_calls=[tool_call("list_files", {}, id="call_a")], usage=(1000, 40))
    groq_server.reply("never heard: its worker is killed first", delay=30, usage=(9999, 999))
    groq_server.reply("Your workspace is empty.", usage=(1300, 20))
    run = submit_run(alice, "List my files", new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: len(model_turns(groq_server)) == 2, "the second model turn to be asked")

    first.kill()
    stopped(first)
    start_worker(**on_groq)

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run to succeed")
    [resumed] = resumes(run)
    assert resumed["reason"] == ResumeReason.WORKER_LOST
    charges = Charge.objects.filter(run_id=run.pk, kind="turn").order_by("step")
    replies = run.events.filter(kind="model_replied").order_by("seq")
    assert list(charges.values_list("step", flat=True)) == [reply.data["step"] for reply in replies]
    assert list(charges.values_list("prompt_tokens", "completion_tokens")) == [
        (1000, 40),
        (1300, 20),
    ]
    expected = (1000 * Decimal("0.15") + 40 * Decimal("0.6")) / MILLION
    expected += (1300 * Decimal("0.15") + 20 * Decimal("0.6")) / MILLION
    assert spend_of_run(run.pk).costs == {"USD": expected}
