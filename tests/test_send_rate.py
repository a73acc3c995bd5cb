"""The per-person send rate (accounting/send_rate.py): counted in PostgreSQL, so two web
processes count into one figure; past it the API answers 429 `rate_limited` with Retry-After,
and the chat says so where the message was typed, keeping it."""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from accounting.send_rate import count_send
from agent.models import AgentRun
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RATE = 3
# Sends counted in one minute: the test starts early enough in one to finish within it.
ROOM_SECONDS = 30


def early_in_a_minute() -> bool:
    return timezone.now().second < 60 - ROOM_SECONDS


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    retry_after: str | None


def start(site_url: str, secret: str, task: str) -> Answer:
    """POST /api/v1/runs to one web process, over HTTP."""
    request = urllib.request.Request(  # noqa: S310 (a test's own local server)
        f"{site_url}/api/v1/runs",
        data=json.dumps({"task": task}).encode(),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            return Answer(response.status, json.loads(response.read()), None)
    except urllib.error.HTTPError as refused:
        return Answer(refused.code, json.loads(refused.read()), refused.headers["Retry-After"])


def test_two_web_processes_and_the_chat_share_one_persons_send_rate(
    settings, start_daphne, alice, alice_key, as_alice
):
    settings.LOOP_SEND_RATE_PER_MINUTE = RATE
    settings.LOOP_USER_ACTIVE_RUNS = 50
    env = {"LOOP_SEND_RATE_PER_MINUTE": str(RATE), "LOOP_USER_ACTIVE_RUNS": "50"}
    first, second = start_daphne(**env), start_daphne(**env)
    wait_for(early_in_a_minute, "a minute's beginning")

    sent = [
        start(site.url, alice_key, f"What is {n} + 1?")
        for n, site in enumerate([first, second, first])
    ]
    refused = start(second.url, alice_key, "What is 9 + 1?")

    assert [answer.status for answer in sent] == [201, 201, 201]
    assert refused.status == 429
    assert refused.body["error"]["code"] == "rate_limited"
    assert "faster than 3 messages a minute" in refused.body["error"]["message"]
    assert 1 <= int(refused.retry_after or 0) <= 60
    # The chat, a third process's view of the same count, refuses too, the task kept.
    page = as_alice.post("/send/", {"task": "What is 10 + 1?"}).content.decode()
    assert "You are sending faster than 3 messages a minute" in page
    assert ">What is 10 + 1?</textarea>" in page
    assert AgentRun.objects.filter(user=alice).count() == RATE


def test_the_count_starts_again_each_minute_and_zero_is_no_limit(settings, alice):
    settings.LOOP_SEND_RATE_PER_MINUTE = 1
    minute = timezone.now().replace(second=0, microsecond=0)
    assert count_send(alice.pk, minute) is None
    too_fast = count_send(alice.pk, minute.replace(second=30))
    assert too_fast is not None
    assert too_fast.retry_after(minute.replace(second=30)) == 30
    assert count_send(alice.pk, minute + timedelta(minutes=1)) is None

    settings.LOOP_SEND_RATE_PER_MINUTE = 0
    assert all(count_send(alice.pk, minute) is None for _ in range(5))
