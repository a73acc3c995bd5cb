"""The page's websocket, through Channels' own testing tools and the real ASGI application."""

import html
import json
import re

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from agent import bus as events_bus
from agent.models import AgentRun
from agent.services import new_conversation, start_run, submit_run
from chat.consumers import CLOSE_NOT_FOUND, CLOSE_TOO_BIG, MAX_MESSAGE_CHARS
from chat.rendering import page_cards
from loopsite.asgi import application

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

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


async def socket(user=None, origin: str = "http://localhost") -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
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


async def test_an_anonymous_socket_is_refused():
    communicator = await socket()
    connected, _ = await communicator.connect()
    assert not connected


async def test_a_socket_from_another_origin_is_refused(alice):
    communicator = await socket(alice, origin="https://evil.example")
    connected, _ = await communicator.connect()
    assert not connected


async def test_another_user_s_run_cannot_be_watched(alice, bob):
    run = await database_sync_to_async(start_run)(alice, "What is 1 + 1?", model="mock")
    communicator = await socket(bob)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    assert await communicator.receive_output(timeout=WAIT) == {
        "type": "websocket.close",
        "code": CLOSE_NOT_FOUND,
    }


async def test_an_oversized_message_closes_the_socket(alice):
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"watch": 1, "pad": "x" * MAX_MESSAGE_CHARS}))
    assert await communicator.receive_output(timeout=WAIT) == {
        "type": "websocket.close",
        "code": CLOSE_TOO_BIG,
    }


async def test_a_malformed_message_closes_the_socket(alice):
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data="watch everything")
    assert (await communicator.receive_output(timeout=WAIT))["type"] == "websocket.close"


def expected_card_ids(run_id: int) -> list[str]:
    run = AgentRun.objects.get(pk=run_id)
    events = run.events.order_by("seq").values_list("seq", "kind", "data")
    return [card.id for card in page_cards(run_id, events)]


@pytest.fixture(params=["postgres", "redis"])
def bus(request, settings) -> dict[str, str]:
    """Both ways events cross from the worker: PostgreSQL NOTIFY, and Redis."""
    if request.param == "postgres":
        return {}
    url = "redis://127.0.0.1:6379/0"
    settings.REDIS_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
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


STREAMED = re.compile(r'id="stream-\d+-\d+-text"[^>]*>([^<]*)<')


async def test_an_answer_streams_in_pieces_then_the_stored_one_takes_its_place(
    alice, start_worker, bus
):
    conversation = await database_sync_to_async(new_conversation)(alice)
    run = await database_sync_to_async(submit_run)(
        alice, "What is 17 * 23?", conversation, model="mock"
    )
    communicator = await socket(alice)
    assert (await communicator.connect())[0]
    await watch(communicator, run.pk)
    acknowledged = await communicator.receive_from(timeout=WAIT)
    assert SEQ_MARKER.findall(acknowledged) == ["0"]  # watching, before the worker starts
    start_worker(**bus)
    seen = await receive_until_finished(communicator)
    await communicator.disconnect()

    pieces = [html.unescape(piece) for message in seen for piece in STREAMED.findall(message)]
    assert len(pieces) > 1
    assert "".join(pieces) == "17 * 23 = 391"
    streamed_at = next(i for i, message in enumerate(seen) if STREAMED.search(message))
    answered_at = next(i for i, message in enumerate(seen) if 'class="card answer' in message)
    assert streamed_at < answered_at
    # The stored answer replaces the streamed text: the streamed card is removed with it.
    assert 'hx-swap-oob="delete"' in seen[answered_at]
    assert "17 * 23 = 391" in seen[answered_at]
