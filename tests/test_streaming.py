"""Streamed text is coalesced: a 1.2 MB answer that Groq sends in 8-character pieces reaches the
run's subscribers whole, in order, in a few hundred messages, over Redis and over NOTIFY; text
gathered while the model pauses goes out without waiting for more.

The run is a real one on GroqLLM against the fake Groq server; Redis is the real one at
127.0.0.1:6379, and NOTIFY is heard on a LISTEN connection of the test's own.
"""

import asyncio
import json

import psycopg
import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from agent import bus
from agent.models import AgentRun, RunEvent, RunStatus
from agent.runs import start_run
from engine.execution import execute_run
from tests.groq_server import groq_server_fixture  # noqa: F401 (the fixture)
from tests.test_bus import REAL_REDIS, publisher_fixture, use_redis  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

# Quotes, a backslash, accents, an emoji and markup: what escaping makes longer in a message.
LINE = 'line {:06d}: "naïve" \\ <b>café</b> 🚀 and the quick brown fox\n'
ANSWER = "".join(LINE.format(n) for n in range(19_800))
WAIT = 120  # seconds: a bound that turns a hang into a failure, not a timing assertion


@pytest.fixture
def on_groq(settings, groq_server, workspaces):
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = "openai/gpt-oss-120b"
    groq_server.reply(ANSWER)
    return groq_server


@pytest.fixture
def only_full_messages(monkeypatch) -> None:
    """Gathered text waits for nothing but a full message or the reply's end, so how many
    messages a reply takes depends on its length alone, not on how fast the machine is."""
    monkeypatch.setattr(bus, "STREAM_SECONDS", 3600.0)


@pytest.fixture
def pieces(monkeypatch) -> list[int]:
    """How many pieces of text the run handed to the bus (each is published all the same)."""
    handed = [0]
    publish_delta = bus.publish_delta

    def counted(run_id: int, step: int, text: str) -> None:
        handed[0] += 1
        publish_delta(run_id, step, text)

    monkeypatch.setattr(bus, "publish_delta", counted)
    return handed


def work(run: AgentRun) -> AgentRun:
    """The run, worked in a thread of its own that leaves no connection to the test database."""
    try:
        return execute_run(run)
    finally:
        connections.close_all()


def assert_streamed_whole(texts: list[str], steps: set[int], pieces: int, most_chars: int) -> None:
    assert len(ANSWER) > 1_200_000
    assert "".join(texts) == ANSWER  # every character once, in order: no gap, no repeat
    assert steps == {1}
    assert pieces > 150_000
    assert len(texts) < pieces / 100  # coalesced: a message carries hundreds of pieces
    assert max(map(len, texts)) <= most_chars


@pytest_asyncio.fixture
async def sync_connections_closed():
    """The database reads of an async test run in a thread that outlives it: close what they
    opened, so the test database can be dropped at the end."""
    yield
    await database_sync_to_async(connections.close_all)()


@pytest.mark.asyncio
async def test_a_long_answer_reaches_a_redis_subscriber_whole_in_few_messages(
    settings,
    monkeypatch,
    tmp_path,
    alice,
    on_groq,
    pieces,
    publisher,
    only_full_messages,
    sync_connections_closed,
):
    use_redis(settings, monkeypatch, tmp_path, REAL_REDIS)
    run = await database_sync_to_async(start_run)(alice, "Write it all out")
    layer = get_channel_layer()
    page = await layer.new_channel()
    await layer.group_add(bus.group_for(run.pk), page)

    working = asyncio.ensure_future(sync_to_async(work, thread_sensitive=False)(run))
    messages = [await asyncio.wait_for(layer.receive(page), WAIT)]
    while not await finished_at(run, messages[-1]):
        messages.append(await asyncio.wait_for(layer.receive(page), WAIT))
    run = await working
    await layer.group_discard(bus.group_for(run.pk), page)

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, ANSWER)
    deltas = [m for m in messages if m["type"] == "run.delta"]
    texts = [m["text"] for m in deltas]
    assert_streamed_whole(texts, {m["step"] for m in deltas}, pieces[0], bus.REDIS_DELTA_CHARS)
    # The first piece at once, then full messages, then the rest at the reply's end.
    assert {len(text) for text in texts[1:-1]} == {bus.REDIS_DELTA_CHARS}
    # The text is all out before the wake-up for the stored reply.
    reply_seq = await database_sync_to_async(lambda: run.events.get(kind="model_replied").seq)()
    last_delta = max(i for i, m in enumerate(messages) if m["type"] == "run.delta")
    # A wake-up at seq S says every event up to S is stored (a reply goes with what follows).
    reply_woken = next(
        i for i, m in enumerate(messages) if m["type"] == "run.event" and m["seq"] >= reply_seq
    )
    assert last_delta < reply_woken
    assert publisher.dropped == 0


@database_sync_to_async
def finished_at(run: AgentRun, message: dict) -> bool:
    """Whether the message is the wake-up for the run's last event."""
    return message["type"] == "run.event" and (
        RunEvent.objects.filter(run=run, seq=message["seq"], kind="run_finished").exists()
    )


def test_a_long_answer_reaches_a_notify_listener_whole_in_few_messages(
    settings, alice, on_groq, pieces, publisher, only_full_messages
):
    assert isinstance(bus.transport(), bus.NotifyTransport)
    run = start_run(alice, "Write it all out")
    with psycopg.connect(**bus.connection_params(), autocommit=True) as listening:
        listening.execute(f"LISTEN {bus.DELTA_CHANNEL}")
        run = execute_run(run)
        assert publisher.drain(WAIT)
        heard, chars = [], 0
        for note in listening.notifies(timeout=WAIT):
            sent = json.loads(note.payload)
            if sent["run"] == run.pk:
                heard.append(sent)
                chars += len(sent["text"])
            if chars >= len(ANSWER):
                break

    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, ANSWER)
    texts = [sent["text"] for sent in heard]
    assert_streamed_whole(
        texts, {sent["step"] for sent in heard}, pieces[0], bus.NOTIFY_PAYLOAD_BYTES
    )
    assert publisher.dropped == 0


def test_a_notify_payload_holds_as_much_text_as_fits_and_never_too_much():
    text = ANSWER[:100_000]
    payloads = bus.notify_payloads(3, 1, text)
    assert "".join(json.loads(p)["text"] for p in payloads) == text
    assert all(len(p) <= bus.NOTIFY_PAYLOAD_BYTES for p in payloads)
    assert all(len(p) > bus.NOTIFY_PAYLOAD_BYTES - 20 for p in payloads[:-1])


def test_text_gathered_while_the_model_pauses_goes_out_without_waiting_for_more(
    settings, publisher
):
    assert isinstance(bus.transport(), bus.NotifyTransport)
    with psycopg.connect(**bus.connection_params(), autocommit=True) as listening:
        listening.execute(f"LISTEN {bus.DELTA_CHANNEL}")
        bus.publish_delta(4, 1, "The first words ")  # a reply's first piece: at once
        bus.publish_delta(4, 1, "and then ")  # gathered, then the model pauses
        # Nothing more comes and the reply has not ended, yet nothing is left gathered.
        assert publisher.drain(WAIT)
        heard = [
            json.loads(note.payload)["text"]
            for note in listening.notifies(timeout=WAIT, stop_after=2)
        ]
    assert heard == ["The first words ", "and then "]
    bus.finish_deltas(4)
