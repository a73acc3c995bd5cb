"""Mail about runs, caught by a real local SMTP server, sent by real `manage.py worker` processes
(the job's, never the run's thread): a person who asked is told when a call waits for them, once
a run however much more happens; never while they have the run's page open (the chat's socket
records that), never when they did not ask. A site webhook is the test's sign that a run's
event was heard: its mail job, if any, was queued before it."""

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.test import Client
from django.utils import timezone
from procrastinate.contrib.django.models import ProcrastinateJob

from agent import bus as events_bus
from agent.llm.scripted import ScriptedLLM
from agent.runs import new_conversation, start_run, submit_run
from approvals.decisions import decide
from approvals.models import ApprovalPreference
from approvals.waiting import CallDecision
from core.events import Decision, RunStatus
from engine.execution import execute_run
from loopsite.asgi import application
from notifications import presence
from notifications.mail import mail_run
from notifications.models import Endpoint, MailChoice, MailReason, Presence, RunMail
from tests.conftest import wait_for
from tests.mail_server import Mailbox, body, mailbox  # noqa: F401 (a fixture)
from tests.webhook_server import Receiver, receiving

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "What is 17 * 23?"  # the mock: one run_code call, then the answer
SITE = "https://loop.example"
ADDRESS = "alice@example.com"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as receiver:
        yield receiver


@pytest.fixture
def inbox(mailbox: Mailbox) -> Mailbox:  # noqa: F811 (the fixture it names)
    """What the test's SMTP server received."""
    return mailbox


@pytest.fixture
def mailing_worker(start_worker, inbox: Mailbox, receiver: Receiver):
    """Start a worker that mails through the test's SMTP server, with the site's webhook at the
    test's receiver, told of every event."""
    Endpoint.objects.create(url=receiver.url)

    def start(**env: str) -> None:
        mail = {"EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(inbox.port)}
        start_worker(**mail, LOOP_SITE_URL=SITE, **env)

    return start


@pytest.fixture
def alice_asks(alice):
    """Alice, with an address, decides before code runs."""
    alice.email = ADDRESS
    alice.save()
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    return alice


def told(receiver: Receiver, event_type: str) -> bool:
    return any(json.loads(request.body)["type"] == event_type for request in receiver.received)


def notify_jobs_done() -> bool:
    due = Q(scheduled_at__isnull=True) | Q(scheduled_at__lte=timezone.now())
    jobs = ProcrastinateJob.objects.filter(queue_name="notify", status__in=("todo", "doing"))
    return not jobs.filter(due).exists()


def heard(receiver: Receiver, event_type: str) -> None:
    """Wait until the event was heard and every mail job queued with it has run."""
    wait_for(lambda: told(receiver, event_type), f"{event_type} told")
    wait_for(notify_jobs_done, "the mail jobs to run")


def approve(run) -> None:
    request = run.approvals.get(decision="")
    decide(run.user, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])


def test_a_call_waiting_mails_its_person_once_for_the_whole_run(
    alice_asks,
    inbox,
    mailing_worker,
    receiver,
):
    MailChoice.objects.create(user=alice_asks, waiting=True, long_run=True)
    mailing_worker(LOOP_NOTIFY_LONG_RUN_SECONDS="0")  # every run is long: a second reason
    conversation = new_conversation(alice_asks)
    run = submit_run(alice_asks, PRODUCT, conversation, model="mock")

    wait_for(lambda: inbox.to(ADDRESS), "the mail about the waiting call")
    (mail,) = inbox.received
    assert mail["Subject"] == f"Loop waits for your decision: {PRODUCT}"
    assert re.findall(r"https?://\S+", body(mail)) == [
        f"{SITE}/c/{conversation.pk}/",
        f"{SITE}/settings/notifications/",
    ]
    assert "waits for your decision" in body(mail)
    assert "run_code" not in body(mail)  # what the call would do stays on the site

    approve(run)
    heard(receiver, "run.finished")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert len(inbox.received) == 1
    assert RunMail.objects.get(run_id=run.pk).reason == MailReason.WAITING
    assert mail_run(run.pk, MailReason.LONG_RUN) is False  # the run had its mail


def test_a_long_run_that_ends_mails_its_person(alice, inbox, mailing_worker, receiver):
    alice.email = ADDRESS
    alice.save()
    MailChoice.objects.create(user=alice, long_run=True)
    mailing_worker(LOOP_NOTIFY_LONG_RUN_SECONDS="0")
    run = submit_run(alice, PRODUCT, new_conversation(alice), model="mock")
    wait_for(lambda: inbox.to(ADDRESS), "the mail about the run's end")
    assert inbox.received[0]["Subject"] == f"Your run ended: {PRODUCT}"
    mailed = wait_for(lambda: RunMail.objects.filter(run_id=run.pk).first(), "its mail's row")
    assert mailed.reason == MailReason.LONG_RUN


def test_no_mail_while_the_person_has_the_run_s_page_open(
    alice_asks,
    inbox,
    mailing_worker,
    receiver,
):
    MailChoice.objects.create(user=alice_asks, waiting=True, long_run=True)
    run = submit_run(alice_asks, PRODUCT, new_conversation(alice_asks), model="mock")
    async_to_sync(presence.watching)(alice_asks.pk, run.pk, "a-socket")  # before any worker
    mailing_worker(LOOP_NOTIFY_LONG_RUN_SECONDS="0")
    heard(receiver, "run.waiting")
    assert inbox.received == []
    assert not RunMail.objects.exists()

    async_to_sync(presence.left)("a-socket")  # she left: the run's end mails her
    approve(run)
    wait_for(lambda: inbox.to(ADDRESS), "the mail about the run's end")
    assert inbox.received[0]["Subject"] == f"Your run ended: {PRODUCT}"


def test_a_failed_run_mails_its_person_and_tells_the_site(
    alice, inbox, mailing_worker, receiver, workspaces
):
    """The run fails in this process (its model has nothing to say); its mail and webhook are
    sent by the worker started after."""
    alice.email = ADDRESS
    alice.save()
    MailChoice.objects.create(user=alice, failed=True)
    run = start_run(alice, PRODUCT, model="mock", conversation=new_conversation(alice))
    run = execute_run(run, llm=ScriptedLLM([]))
    assert run.status == RunStatus.FAILED
    mailing_worker()
    wait_for(lambda: inbox.to(ADDRESS), "the mail about the failure")
    assert inbox.received[0]["Subject"] == f"Your run failed: {PRODUCT}"
    wait_for(lambda: told(receiver, "run.failed"), "the failure told")


def test_no_mail_for_a_person_who_did_not_ask(alice_asks, inbox, mailing_worker, receiver):
    MailChoice.objects.create(user=alice_asks, failed=True)  # not for waits
    mailing_worker()
    submit_run(alice_asks, PRODUCT, new_conversation(alice_asks), model="mock")
    heard(receiver, "run.waiting")
    assert inbox.received == []
    assert not RunMail.objects.exists()


def test_a_person_chooses_what_they_are_mailed_about(as_alice, alice):
    page = as_alice.get("/settings/notifications/")
    assert page.status_code == 200
    assert "no mail address" in page.content.decode()
    saved = as_alice.post("/settings/notifications/", {"waiting": "on", "failed": "on"})
    assert saved.status_code == 302
    choice = MailChoice.objects.get(user=alice)
    assert (choice.waiting, choice.failed, choice.long_run) == (True, True, False)
    assert 'href="/settings/notifications/"' in as_alice.get("/").content.decode()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.mark.asyncio
async def test_the_chat_s_socket_records_who_is_on_a_run_s_page(alice):
    run = await database_sync_to_async(start_run)(alice, "What is 1 + 1?", model="mock")
    cookie = await database_sync_to_async(session_cookie)(alice)
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", cookie.encode()),
    ]
    communicator = WebsocketCommunicator(application, "/ws/runs/", headers=headers)
    try:
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=json.dumps({"watch": run.pk, "after": 0}))
        on_page = database_sync_to_async(presence.on_the_page)
        for _ in range(600):  # bounded: the watch is taken in order, after the connect
            if await on_page(alice.pk, run.pk):
                break
            await asyncio.sleep(0.05)
        assert await on_page(alice.pk, run.pk)
        await communicator.disconnect()
        assert not await database_sync_to_async(Presence.objects.exists)()
    finally:
        await events_bus.stop_listening()
        await database_sync_to_async(connections.close_all)()
