"""Signed webhooks, received by a local HTTP server as a receiver would take them, delivered by
real `manage.py worker` processes: the signature checks out (Standard Webhooks), a 500 is tried
again and then delivered under the same id, the console's delivery log shows both attempts, a
run's wait, its decision and its end are each told, a person's URL on a private address is
refused (at the form and at the connection), and a test can be sent from the console."""

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.runs import new_conversation, submit_run
from approvals.decisions import decide, expire
from approvals.models import ApprovalPreference
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from notifications.models import Attempt, Delivery, Endpoint, Presence
from notifications.tasks import prune_notifications
from tests.conftest import wait_for
from tests.webhook_server import Receiver, receiving, verified

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer
# Retries a second apart, so the test waits for them in seconds, not minutes.
QUICK_RETRIES = {"LOOP_WEBHOOK_RETRY_SECONDS": "1,1,1"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as receiver:
        yield receiver


def bodies(receiver: Receiver) -> list[dict]:
    return [json.loads(request.body) for request in receiver.received]


def types(receiver: Receiver) -> list[str]:
    return [body["type"] for body in bodies(receiver)]


def status_of(run) -> str:
    run.refresh_from_db()
    return run.status


def notify_jobs_done() -> bool:
    """No mail or delivery job waits or runs now (a retry scheduled later aside: the job table
    is not emptied between tests)."""
    due = Q(scheduled_at__isnull=True) | Q(scheduled_at__lte=timezone.now())
    jobs = ProcrastinateJob.objects.filter(queue_name="notify", status__in=("todo", "doing"))
    return not jobs.filter(due).exists()


def test_a_webhook_refused_with_a_500_is_retried_and_delivered_signed(
    alice, receiver, start_worker, operator, client
):
    endpoint = Endpoint.objects.create(url=receiver.url, events=["run.finished"])
    receiver.statuses = [500]
    start_worker(**QUICK_RETRIES)
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")

    wait_for(lambda: len(receiver.received) == 2, "the delivery, then its retry")
    first, second = receiver.received
    assert all(verified(endpoint.secret, request) for request in (first, second))
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body == second.body
    body = json.loads(second.body)
    assert body["type"] == "run.finished"
    assert body["data"]["run"] == run.pk
    assert body["data"]["status"] == RunStatus.SUCCEEDED
    assert body["data"]["person"] == "alice"
    assert "391" not in second.body.decode()  # the answer stays on the site

    delivery = Delivery.objects.get(endpoint=endpoint)
    wait_for(lambda: delivery.attempts.count() == 2, "both attempts logged")
    delivery.refresh_from_db()
    assert delivery.state == Delivery.State.DELIVERED
    assert [(a.number, a.status_code) for a in delivery.attempts.all()] == [(1, 500), (2, 200)]
    assert delivery.attempts.first().error == "HTTP 500"

    page = client.get(f"/admin/notifications/delivery/{delivery.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "HTTP 500" in text
    assert delivery.webhook_id in text
    listing = client.get("/admin/notifications/delivery/").content.decode()
    assert "delivered" in listing


def test_a_wait_its_decision_and_the_end_are_each_told(alice, receiver, start_worker):
    """The run parks for a decision (recorded without a worker's flush), the decision is taken
    in this process: both reach the endpoint, as the end does."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    endpoint = Endpoint.objects.create(url=receiver.url)
    start_worker()
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: "run.waiting" in types(receiver), "the run's wait told")
    waiting = bodies(receiver)[-1]
    assert waiting["data"]["tools"] == ["run_code"]
    assert waiting["data"]["status"] == RunStatus.AWAITING_APPROVAL

    request = run.approvals.get(decision="")
    decide(alice, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the approved run's end")
    wait_for(lambda: "run.finished" in types(receiver), "its end told")
    assert types(receiver) == ["run.waiting", "approval.decided", "run.finished"]
    decided = bodies(receiver)[1]["data"]
    assert (decided["tool"], decided["decision"]) == ("run_code", "approve")
    assert all(verified(endpoint.secret, request) for request in receiver.received)


def test_a_call_that_expires_is_told_as_decided_expired_and_the_run_as_halted(
    alice, receiver, start_worker
):
    """The expiry ends the run without a worker (approvals/waiting.py): still told."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    Endpoint.objects.create(url=receiver.url, events=["approval.decided", "run.finished"])
    start_worker()
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: status_of(run) == RunStatus.AWAITING_APPROVAL, "the run to wait")
    assert expire(run.pk)
    # Two deliveries, each its own job: either may arrive first.
    told = {"approval.decided", "run.finished"}
    wait_for(lambda: told <= set(types(receiver)), "the expiry and the end told")
    by_type = {body["type"]: body for body in bodies(receiver)}
    decided, finished = by_type["approval.decided"], by_type["run.finished"]
    assert decided["data"]["decision"] == "expired"
    assert (finished["data"]["status"], finished["data"]["halt_reason"]) == (
        RunStatus.HALTED,
        "no_decision",
    )


def test_a_person_s_webhook_on_a_private_address_is_refused_at_the_form(as_alice, alice, settings):
    settings.LOOP_PERSON_WEBHOOKS = True
    for url in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://169.254.169.254/"):
        response = as_alice.post("/settings/notifications/webhooks/", {"url": url})
        assert response.status_code == 400, url
        assert "address" in response.content.decode()
    assert not Endpoint.objects.exists()


def test_a_person_s_webhook_is_refused_a_private_address_at_the_connection(
    alice, receiver, start_worker
):
    """A name may resolve to a private address after the form checked it: the connection is
    vetted again, and nothing reaches the server."""
    Endpoint.objects.create(owner=alice, url=receiver.url)
    start_worker(LOOP_PERSON_WEBHOOKS="1", LOOP_WEBHOOK_RETRY_SECONDS="3600")
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the run's end")
    delivery = wait_for(lambda: Delivery.objects.filter(run_id=run.pk).first(), "its delivery")
    wait_for(lambda: delivery.attempts.exists(), "the attempt logged")
    attempt = delivery.attempts.get()
    assert attempt.status_code is None
    assert "loopback" in attempt.error
    assert receiver.received == []


def test_a_site_endpoint_made_in_the_console_shows_its_secret_once_and_sends_a_test(
    operator, client, receiver, start_worker
):
    made = client.post(
        "/admin/notifications/endpoint/add/",
        {"url": receiver.url, "description": "ops", "active": "on"},
    )
    endpoint = Endpoint.objects.get()
    assert endpoint.owner is None
    assert endpoint.secret.startswith("whsec_")
    assert endpoint.secret in made.content.decode()
    change = client.get(f"/admin/notifications/endpoint/{endpoint.pk}/change/")
    assert endpoint.secret not in change.content.decode()

    start_worker()
    client.post(
        "/admin/notifications/endpoint/",
        {"action": "test", "_selected_action": [endpoint.pk]},
    )
    wait_for(lambda: receiver.received, "the test")
    (test,) = receiver.received
    assert json.loads(test.body)["type"] == "test"
    assert verified(endpoint.secret, test)

    old = endpoint.secret
    renewed = client.post(
        "/admin/notifications/endpoint/",
        {"action": "renew_secret", "_selected_action": [endpoint.pk]},
    )
    endpoint.refresh_from_db()
    assert endpoint.secret != old
    assert endpoint.secret in renewed.content.decode()


def test_a_person_s_page_sends_a_test_and_shows_its_delivery(
    as_alice, alice, settings, receiver, start_worker
):
    settings.LOOP_PERSON_WEBHOOKS = True
    settings.LOOP_WEBHOOK_PRIVATE_NETWORKS = ["127.0.0.1/32"]  # admitted by the operator
    made = as_alice.post(
        "/settings/notifications/webhooks/", {"url": receiver.url, "events": ["run.failed"]}
    )
    assert made.status_code == 201
    endpoint = Endpoint.objects.get(owner=alice)
    assert endpoint.events == ["run.failed"]
    assert endpoint.secret in made.content.decode()
    assert endpoint.secret not in as_alice.get("/settings/notifications/").content.decode()

    start_worker(LOOP_PERSON_WEBHOOKS="1", LOOP_WEBHOOK_PRIVATE_NETWORKS="127.0.0.1/32")
    as_alice.post(f"/settings/notifications/webhooks/{endpoint.pk}/test/")
    wait_for(lambda: receiver.received, "the test")
    assert verified(endpoint.secret, receiver.received[0])
    wait_for(notify_jobs_done, "the delivery's job to end")
    page = as_alice.get("/settings/notifications/").content.decode()
    assert "delivered" in page


def test_without_person_webhooks_a_person_has_none(as_alice, alice, bob, settings):
    settings.LOOP_PERSON_WEBHOOKS = False
    page = as_alice.get("/settings/notifications/")
    assert page.status_code == 200
    assert "Add a webhook" not in page.content.decode()
    refused = as_alice.post("/settings/notifications/webhooks/", {"url": "https://example.com/"})
    assert refused.status_code == 404
    theirs = Endpoint.objects.create(owner=bob, url="https://example.com/")
    settings.LOOP_PERSON_WEBHOOKS = True
    assert as_alice.post(f"/settings/notifications/webhooks/{theirs.pk}/test/").status_code == 404


def test_old_deliveries_and_stale_presences_are_pruned_a_pending_one_stays(alice, settings):
    settings.LOOP_KEEP_DELIVERIES_DAYS = 30
    endpoint = Endpoint.objects.create(url="https://example.com/")
    long_ago = timezone.now() - timedelta(days=31)

    def made(state: str, when) -> Delivery:
        return Delivery.objects.create(
            endpoint=endpoint,
            webhook_id=f"msg_{state}_{when.day}",
            event_type="run.finished",
            body="{}",
            state=state,
            created_at=when,
        )

    old = made(Delivery.State.DELIVERED, long_ago)
    still_tried = made(Delivery.State.PENDING, long_ago)
    recent = made(Delivery.State.FAILED, timezone.now())
    Attempt.objects.create(delivery=old, number=1, status_code=200, duration=0.1)
    Presence.objects.create(channel="gone", run_id=1, user_id=alice.pk, since=long_ago)
    Presence.objects.create(channel="here", run_id=2, user_id=alice.pk)

    assert prune_notifications.func(timestamp=0) == 1
    assert set(Delivery.objects.values_list("pk", flat=True)) == {still_tried.pk, recent.pk}
    assert not Attempt.objects.exists()
    assert list(Presence.objects.values_list("channel", flat=True)) == ["here"]
