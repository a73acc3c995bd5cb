"""The page's websocket, through Channels' own testing tools and the real ASGI application."""

import asyncio
import json
import re

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from agent import bus as events_bus
from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import new_conversation, start_run, submit_run
from agent.selectors import events_of
from chat.consumers import MAX_MESSAGE_CHARS, Close
from chat.rendering import page_cards
from core.events import ModelReplied, RunFinished, RunStatus, ToolCallStarted
from loopsite.asgi import application

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

PUBSUB = "loopsite.channel_layer.PubSubChannelLayer"  # as loopsite.settings chooses

CARD_ID = re.compile(r'<(?:article|div) class="card [^"]*" id="([^"]+)"')
RUNNING_CARD_ID = re.compile(r'<article class="card tool status-running" id="([^"]+)"')
SEQ_MARKER = re.compile(r'id="run-\d+-seq" data-run="\d+" data-seq="(\d+)"')
WAIT = 60  # seconds: a bound that turns a hang into a failure, not a timing assertion


@pytest_asyncio.fixture(autouse=True)
async def _no_connection_outlives_its_test():
    """The socket's database reads run in a thread that outlives the test: close what it opened,
    and the listener's own connection, so the test database can be dropped at the end."""
    yield
    await events_bus.stop_listening()
    await database_sync_to_async(connections.close_all)()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


async def socket(
    user=None, origin: str = "http://localhost", extra: tuple[tuple[bytes, bytes], ...] = ()
) -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"localhost"), *extra]
    if user is not None:
        cookie = await database_sync_to_async(session_cookie)(user)
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/runs/", headers=headers)


async def watch(communicator: WebsocketCommunicator, run_id: int, after: int = 0) -> None:
    await communicator.send_to(text_data=json.dumps({"watch": run_id, "after": after}))


async def receive_until_finished(communicator: WebsocketCommunicator) -> list[str]:
    messages = []
    while not messages or 'data-seq="' not in messages[-1] or "data-watch" in messages[-1]:
        messages.append(await communicator.receive_from(timeout=WAIT))
    return messages


async def closed_with(communicator: WebsocketCommunicator) -> int:
    """The code the socket closes with, after the status frame that tells the page why."""
    status = await communicator.receive_output(timeout=WAIT)
    assert 'data-state="closed"' in status["text"], status
    closed = await communicator.receive_output(timeout=WAIT)
    assert closed["type"] == "websocket.close", closed
    return closed["code"]


async def test_an_anonymous_socket_is_refused():
    communicator = await socket()
    connected, _ = await communicator.connect()
    assert not connected


async def test_a_socket_from_another_origin_is_refused(alice):
    communicator = await socket(alice, origin="https://evil.example")
    connected, _ = await communicator.connect()
    assert not connected


async def test_behind_a_tls_proxy_the_socket_s_own_origin_is_https(alice, settings):
    """SECURE_PROXY_SSL_HEADER counts as Django's request.is_secure() counts it."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = ((b"x-forwarded-proto", b"https"),)
    for origin, extra, allowed in [
        ("https://localhost", proxied, True),
        ("http://localhost", proxied, False),
        ("https://localhost", (), False),
    ]:
        communicator = await socket(alice, origin=origin, extra=extra)
        assert (await communicator.connect())[0] is allowed, (origin, extra)
        await communicator.disconnect()


async def test_another_user_s_run_cannot_be_watched(alice, bob):
    run = await database_sync_to_async(start_run)(alice, "What is 1 + 1?", model="mock")
    communicator = await socket(bob)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    assert await closed_with(communicator) == Close.NOT_FOUND


async def test_another_user_s_run_s_wake_ups_are_never_sent_while_it_is_checked(alice, bob):
    """The socket joins a run's group before its first read, which checks whose the run is: the
    wake-ups that reach it meanwhile, events carried and streamed text, are never sent."""
    run = await database_sync_to_async(start_run)(alice, "What is 1 + 1?", model="mock")
    communicator = await socket(bob)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    layer, group = get_channel_layer(), events_bus.group_for(run.pk)
    secret = {"step": 1, "call_id": "c1", "tool": "run_code", "arguments": '{"code": "SECRET"}'}
    for seq in range(1, 20):
        await layer.group_send(
            group, events_bus.wake_up(run.pk, seq, [(seq, "tool_call_started", secret)])
        )
        await layer.group_send(group, events_bus.delta(run.pk, seq, "SECRET"))
    assert await closed_with(communicator) == Close.NOT_FOUND
    assert await communicator.receive_nothing(timeout=0.5)


async def test_an_oversized_message_closes_the_socket(alice):
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"watch": 1, "pad": "x" * MAX_MESSAGE_CHARS}))
    assert await closed_with(communicator) == Close.TOO_BIG


async def test_a_malformed_message_closes_the_socket(alice):
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data="watch everything")
    assert await closed_with(communicator) == Close.BAD_MESSAGE


def expected_card_ids(run_id: int) -> list[str]:
    run = AgentRun.objects.get(pk=run_id)
    return [card.id for card in page_cards(run_id, events_of(run))]


@pytest.fixture(params=["postgres", "redis"])
def bus(request, settings) -> dict[str, str]:
    """Both ways events cross from the worker: PostgreSQL NOTIFY, and Redis."""
    if request.param == "postgres":
        return {}
    url = "redis://127.0.0.1:6379/0"
    settings.REDIS_URL = url
    hosts = [{"address": url, "socket_timeout": 10}]  # as loopsite.settings builds it
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": PUBSUB, "CONFIG": {"hosts": hosts}}}
    return {"REDIS_URL": url}


async def test_a_reconnecting_page_gets_every_step_once_from_a_worker(alice, start_worker, bus):
    conversation = await database_sync_to_async(new_conversation)(alice)
    run = await database_sync_to_async(submit_run)(
        alice, "Count slowly to 3", conversation, model="mock"
    )
    start_worker(**bus)
    first = await socket(alice)
    assert (await first.connect())[0]
    await watch(first, run.pk)
    # Watch until the first step has finished, then drop the connection mid-run.
    seen = [await first.receive_from(timeout=WAIT)]
    while "status-ok" not in seen[-1]:
        seen.append(await first.receive_from(timeout=WAIT))
    await first.disconnect()
    last_seq = int(SEQ_MARKER.findall(seen[-1])[-1])

    second = await socket(alice)
    assert (await second.connect())[0]
    await watch(second, run.pk, after=last_seq)
    seen += await receive_until_finished(second)
    await second.disconnect()

    pushed = [card_id for message in seen for card_id in CARD_ID.findall(message)]
    pushed = [card_id for card_id in pushed if not card_id.startswith("stream-")]  # transient
    running = [card_id for message in seen for card_id in RUNNING_CARD_ID.findall(message)]
    expected = await database_sync_to_async(expected_card_ids)(run.pk)
    # Each card arrives once; a tool call's card twice (running, then its result in its place).
    assert sorted(pushed) == sorted(expected + running)
    assert len(running) == 3, seen
    markers = [int(seq) for message in seen for seq in SEQ_MARKER.findall(message)]
    assert markers == sorted(markers)  # never backwards (a watch is acknowledged with its seq)
    assert "I counted to 3, one step a second." in seen[-1]


STREAMED = re.compile(
    r'<div class="writing" id="stream-\d+-\d+-writing"[^>]*>(.*?)</div>', re.DOTALL
)


def record(run: AgentRun, *events) -> None:
    """Store events of a run as a worker would (the recorder, with its NOTIFY or Redis)."""
    recorder = RunRecorder(run)
    for event in events:
        recorder(event)


async def stream(run: AgentRun, *pieces: str, at: int = 0) -> None:
    """Pieces of the reply to the run's first step, as the publisher sends them: each saying
    how much of the reply came before it, from `at`."""
    layer = get_channel_layer()
    for piece in pieces:
        await layer.group_send(events_bus.group_for(run.pk), events_bus.delta(run.pk, 1, piece, at))
        at += len(piece)


async def test_streamed_pieces_show_until_the_stored_answer_takes_their_place(alice, bus):
    run = await database_sync_to_async(start_run)(alice, "What is 17 * 23?", model="mock")
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    assert SEQ_MARKER.findall(await communicator.receive_from(timeout=WAIT)) == ["0"]
    await stream(run, "1. **Sev", "enteen** * 23", " = <b>391</b>")
    card = await communicator.receive_from(timeout=WAIT)
    assert f'<article class="card streaming" id="stream-{run.pk}-1"' in card
    more = [await communicator.receive_from(timeout=WAIT) for _ in range(2)]
    # Each message draws the text so far as the answer will be drawn, in place of the last.
    drawn = [text for message in [card, *more] for text in STREAMED.findall(message)]
    assert drawn == [
        "<ol>\n<li><strong>Sev</strong></li>\n</ol>\n",
        "<ol>\n<li><strong>Seventeen</strong> * 23</li>\n</ol>\n",
        "<ol>\n<li><strong>Seventeen</strong> * 23 = &lt;b&gt;391&lt;/b&gt;</li>\n</ol>\n",
    ]
    assert all('hx-swap-oob="true"' in message for message in more)

    await database_sync_to_async(record)(
        run,
        ModelReplied(
            step=1, text="17 * 23 = 391", tool_calls=[], prompt_tokens=10, completion_tokens=5
        ),
        RunFinished(status=RunStatus.SUCCEEDED, answer="17 * 23 = 391"),
    )
    seen = await receive_until_finished(communicator)
    answered = next(message for message in seen if 'class="card answer' in message)
    assert f'<div id="stream-{run.pk}-1" hx-swap-oob="delete">' in answered
    await communicator.disconnect()


async def test_a_reply_heard_from_its_middle_is_not_drawn(alice):
    """A page that began watching mid-reply lacks its start: drawn from there, its Markdown
    could show as text (a closing `**` taken for an opening one). It waits for the answer."""
    run = await database_sync_to_async(start_run)(alice, "What is 17 * 23?", model="mock")
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    assert SEQ_MARKER.findall(await communicator.receive_from(timeout=WAIT)) == ["0"]
    await stream(run, "enteen** * 23", " = 391", at=len("1. **Sev"))
    assert await communicator.receive_nothing(timeout=1)
    await communicator.disconnect()


async def test_a_worker_s_streamed_pieces_reach_the_run_s_group_before_its_reply(
    alice, start_worker, bus
):
    conversation = await database_sync_to_async(new_conversation)(alice)
    run = await database_sync_to_async(submit_run)(
        alice, "What is 17 * 23?", conversation, model="mock"
    )
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(events_bus.group_for(run.pk), channel)
    await events_bus.transport().listener().watch(run.pk)  # over Redis, the group is enough
    start_worker(**bus)
    messages = [await asyncio.wait_for(layer.receive(channel), WAIT)]
    while messages[-1].get("seq") is None or messages[-1]["seq"] != await final_seq(run):
        messages.append(await asyncio.wait_for(layer.receive(channel), WAIT))
    pieces = [m["text"] for m in messages if m["type"] == "run.delta"]
    assert len(pieces) > 1
    assert "".join(pieces) == "17 * 23 = 391"
    reply_seq = await database_sync_to_async(
        lambda: run.events.get(kind="model_replied", step=2).seq
    )()
    # A wake-up at seq S says every event up to S is stored (a reply goes with what follows).
    reply_woken = next(
        i for i, m in enumerate(messages) if m["type"] == "run.event" and m["seq"] >= reply_seq
    )
    assert max(i for i, m in enumerate(messages) if m["type"] == "run.delta") < reply_woken


@database_sync_to_async
def final_seq(run: AgentRun) -> int:
    """The seq of the run's last event, once it has finished; -1 before."""
    run.refresh_from_db()
    last = run.events.order_by("-seq").values_list("seq", flat=True).first()
    return last if run.is_finished and last is not None else -1


async def test_a_page_that_watches_a_run_again_from_an_earlier_seq_gets_what_follows_it(alice):
    """A Continue's response redraws its turn from the log as the view read it, while this
    socket may have sent a later event into the turn it replaced (the run's marker, seen in CI
    under load: the page never showed it). The page watches the run again from its new turn's
    seq marker, and the socket sends what follows it, though it sent it before (the page does
    not add a card it shows twice: tests/test_socket_page.py)."""
    run = await database_sync_to_async(start_run)(alice, "Count slowly to 3", model="mock")
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    drawn = int(SEQ_MARKER.findall(await frame_with(communicator, 'data-seq="'))[-1])
    await database_sync_to_async(record)(run, STARTED)
    card = f'id="call-{run.pk}-1-c1"'
    sent = await frame_with(communicator, card)  # into the turn the response replaces

    await watch(communicator, run.pk, after=drawn)  # the response's turn, drawn before it
    again = await frame_with(communicator, card)
    assert SEQ_MARKER.findall(again) == SEQ_MARKER.findall(sent)
    await communicator.disconnect()


async def frame_with(communicator: WebsocketCommunicator, text: str) -> str:
    """The next frame with `text` (a busy machine may first send the header's status)."""
    while text not in (frame := await communicator.receive_from(timeout=WAIT)):
        assert 'data-seq="' not in frame, frame  # no other frame of the run's comes first
    return frame


STARTED = ToolCallStarted(step=1, call_id="c1", tool="run_code", arguments="{}")
