"""Publishing a run's events never waits on the transport, and says once what failed.

Redis is faulted at the network edge: a port nothing listens on, and a local server that accepts
and never answers (a silent Redis). The run, the recorder, the publisher and channels_redis are the
real ones; two sites share the real Redis at 127.0.0.1:6379.
"""

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator

import psycopg
import pytest
from channels.layers import get_channel_layer

from agent import bus
from agent.models import AgentRun, RunStatus
from agent.recorder import RunRecorder
from agent.runs import new_conversation, start_run, submit_run
from core.events import ToolCallStarted
from engine.execution import execute_run
from tests.conftest import wait_for
from tests.test_settings import load_settings

pytestmark = pytest.mark.django_db(transaction=True)

REAL_REDIS = "redis://127.0.0.1:6379/0"
TASK = "List my files"  # the mock lists them, then streams its answer


class SilentRedis:
    """A TCP server that accepts connections and reads what it is sent, never answering."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.heard = threading.Event()  # a client has sent it something
        self.thread = threading.Thread(target=self.serve, name="silent-redis", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:  # closed: the test is over
                return
            self.accepted.append(client)
            threading.Thread(target=self.listen, args=(client,), daemon=True).start()

    def listen(self, client: socket.socket) -> None:
        try:
            while client.recv(65536):
                self.heard.set()
        except OSError:
            return

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes accept(), and the port stops listening
        self.server.close()
        for client in self.accepted:
            client.shutdown(socket.SHUT_RDWR)  # what was waiting on it fails at once
            client.close()


@pytest.fixture(name="publisher")
def publisher_fixture(monkeypatch) -> Iterator[bus.Publisher]:
    """A publisher of the test's own: no outage or queue left over from another test."""
    fresh = bus.Publisher()
    monkeypatch.setattr(bus, "_publisher", fresh)
    yield fresh
    fresh.stop()


@pytest.fixture
def silent_redis(publisher) -> Iterator[SilentRedis]:
    server = SilentRedis()
    yield server
    server.close()  # before the publisher stops: its send in flight then fails


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens on it once the probe is closed


def use_redis(settings, monkeypatch, tmp_path, url: str, **env: str) -> None:
    """Point this process at `url` with the channel layer settings.py builds for it."""
    built = load_settings(monkeypatch, tmp_path, REDIS_URL=url, **env)
    settings.REDIS_URL = url
    settings.CHANNEL_LAYERS = built["CHANNEL_LAYERS"]


def bus_warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "agent.bus" and r.levelname == "WARNING"
    ]


def assert_logged_whole(run: AgentRun) -> None:
    seqs = list(run.events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert run.events.order_by("seq").last().kind == "run_finished"


def test_a_run_with_redis_down_succeeds_and_the_log_says_once_what_failed(
    settings, monkeypatch, tmp_path, alice, workspaces, publisher, caplog
):
    port = closed_port()
    use_redis(settings, monkeypatch, tmp_path, f"redis://127.0.0.1:{port}/0")
    caplog.set_level(logging.INFO, logger="agent.bus")

    run = execute_run(start_run(alice, TASK, model="mock"))

    assert run.status == RunStatus.SUCCEEDED
    assert_logged_whole(run)
    assert publisher.drain(60)
    events = run.events.count()
    assert publisher.dropped >= events  # every wake-up failed and was dropped, none waited for
    [warning] = bus_warnings(caplog)  # once for the outage, not once per event
    assert f"Redis at 127.0.0.1:{port}/0" in warning
    assert "ConnectionError: Error 111 connecting to" in warning


def test_a_silent_redis_never_holds_up_a_run(
    settings, monkeypatch, tmp_path, alice, workspaces, publisher, silent_redis
):
    use_redis(settings, monkeypatch, tmp_path, f"redis://127.0.0.1:{silent_redis.port}/0")
    # The only bound left on a send is the publisher's own, made an hour: a run that waited on
    # the transport anywhere would not finish.
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["socket_timeout"] = None
    monkeypatch.setattr(bus, "SEND_SECONDS", 3600.0)

    run = execute_run(start_run(alice, TASK, model="mock"))

    assert run.status == RunStatus.SUCCEEDED
    assert_logged_whole(run)
    # The run is over while its first message is still being sent to a server that has heard
    # it and never answered; everything after it is still queued.
    assert silent_redis.heard.wait(60)
    with publisher.changed:
        assert publisher.sending is not None
        assert publisher.sending.run_id == run.pk
        assert publisher.handled == 0
        assert len(publisher.queue) == publisher.tickets - 1
        assert publisher.dropped == 0


def test_a_silent_redis_is_named_in_the_log_with_its_timeout(
    settings, monkeypatch, tmp_path, publisher, silent_redis, caplog
):
    use_redis(settings, monkeypatch, tmp_path, f"redis://127.0.0.1:{silent_redis.port}/0")
    caplog.set_level(logging.INFO, logger="agent.bus")

    for seq in range(1, 6):
        bus.publish(1, seq)
    assert publisher.drain(60)

    [warning] = bus_warnings(caplog)
    assert f"Redis at 127.0.0.1:{silent_redis.port}/0" in warning
    assert f"TimeoutError: no answer within {bus.SEND_SECONDS} s" in warning
    assert publisher.dropped == 5
    assert silent_redis.heard.is_set()


def test_a_worker_with_redis_down_finishes_its_run_and_says_what_failed(
    alice, start_worker, workspaces
):
    port = closed_port()
    run = submit_run(alice, TASK, new_conversation(alice), model="mock")
    worker = start_worker(REDIS_URL=f"redis://127.0.0.1:{port}/0")

    wait_for(
        lambda: AgentRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
        "the run to succeed",
    )
    worker.terminate()
    output = worker.communicate(timeout=60)[0]

    assert_logged_whole(AgentRun.objects.get(pk=run.pk))
    failures = [line for line in output.splitlines() if "Publishing run events to" in line]
    assert len(failures) == 1, output
    assert f"Redis at 127.0.0.1:{port}/0 failed (ConnectionError: " in failures[0]


@pytest.mark.asyncio
async def test_two_sites_on_one_redis_database_do_not_hear_each_other(
    settings, monkeypatch, tmp_path, publisher
):
    # Both sites get the same channels_redis key prefix here: only the group names part them.
    use_redis(settings, monkeypatch, tmp_path, REAL_REDIS)
    layer = get_channel_layer()
    heard = {}
    for site in ("site-a", "site-b"):
        settings.LOOP_CHANNEL_PREFIX = site
        heard[site] = await layer.new_channel()
        await layer.group_add(bus.group_for(7), heard[site])

    settings.LOOP_CHANNEL_PREFIX = "site-b"
    bus.publish(7, 1)  # site B's run 7
    assert publisher.drain(60)
    settings.LOOP_CHANNEL_PREFIX = "site-a"
    bus.publish(7, 2)  # then site A's run 7
    assert publisher.drain(60)

    assert await layer.receive(heard["site-b"]) == bus.wake_up(7, 1)
    # Site A's channel hears its own message first: site B's, sent before it, never came.
    assert await layer.receive(heard["site-a"]) == bus.wake_up(7, 2)
    assert publisher.dropped == 0
    for site in heard:
        settings.LOOP_CHANNEL_PREFIX = site
        await layer.group_discard(bus.group_for(7), heard[site])


@pytest.mark.asyncio
async def test_a_wake_up_dropped_while_redis_was_down_is_sent_once_it_answers(
    settings, monkeypatch, tmp_path, publisher
):
    use_redis(settings, monkeypatch, tmp_path, REAL_REDIS)
    layer = get_channel_layer()
    page = await layer.new_channel()
    await layer.group_add(bus.group_for(9), page)

    use_redis(settings, monkeypatch, tmp_path, f"redis://127.0.0.1:{closed_port()}/0")
    for seq in (1, 2, 3):
        bus.publish(9, seq)
    assert publisher.drain(60)
    assert publisher.dropped >= 3
    use_redis(settings, monkeypatch, tmp_path, REAL_REDIS)  # the transport answers again

    # The run's latest wake-up, once: the page reads events 1 to 3 from the log.
    assert await asyncio.wait_for(layer.receive(page), 60) == bus.wake_up(9, 3)
    assert publisher.drain(60)
    assert publisher.outage is None
    assert not publisher.missed
    await layer.group_discard(bus.group_for(9), page)


def test_a_site_s_groups_carry_its_database_s_name_unless_a_prefix_is_set(settings):
    settings.LOOP_CHANNEL_PREFIX = ""
    assert bus.group_for(5) == f"{settings.DATABASES['default']['NAME']}.run-5"
    settings.LOOP_CHANNEL_PREFIX = "shop/eu west"
    assert bus.group_for(5) == "shop_eu_west.run-5"  # only what a group name may hold


def test_a_set_prefix_also_parts_the_sites_redis_keys(monkeypatch, tmp_path):
    built = load_settings(monkeypatch, tmp_path, REDIS_URL=REAL_REDIS, LOOP_CHANNEL_PREFIX="eu")
    assert built["CHANNEL_LAYERS"]["default"]["CONFIG"]["prefix"] == "eu"


def test_the_transport_is_chosen_once_for_a_run_s_every_event_and_streamed_piece(
    settings, monkeypatch, alice, workspaces, publisher
):
    chosen: list[bus.Transport] = []
    choose = bus.choose

    def counted() -> bus.Transport:
        chosen.append(choose())
        return chosen[-1]

    monkeypatch.setattr(bus, "choose", counted)
    monkeypatch.setattr(bus, "_chosen", None)

    run = execute_run(start_run(alice, TASK, model="mock"))  # its answer streams

    assert run.status == RunStatus.SUCCEEDED
    assert publisher.drain(60)
    assert run.events.count() > 3
    assert len(chosen) == 1
    assert isinstance(chosen[0], bus.NotifyTransport)
    # Chosen again only when the setting changes (a test pointing the site at Redis).
    settings.REDIS_URL = REAL_REDIS
    assert isinstance(bus.transport(), bus.RedisTransport)
    assert bus.transport() is bus.transport() is chosen[1]
    assert bus.transport().name == "Redis at 127.0.0.1:6379/0"


def test_an_event_s_insert_notifies_the_wake_up_the_listener_reads(alice, publisher):
    run = start_run(alice, TASK, model="mock")
    with psycopg.connect(**bus.connection_params(), autocommit=True) as listening:
        listening.execute(f"LISTEN {bus.NOTIFY_CHANNEL}")
        RunRecorder(run)(ToolCallStarted(step=1, call_id="c1", tool="list_files", arguments="{}"))
        [note] = listening.notifies(timeout=60, stop_after=1)
    assert bus.heard(note.channel, note.payload) == bus.wake_up(run.pk, 1)
