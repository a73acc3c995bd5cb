"""A channel layer that is down or hangs: with REDIS_URL at a closed port, or at a server that
accepts and never answers, the page's socket still opens, catches up from the event log, says
live updates are delayed, keeps reading the log for the page, and the log says what failed."""

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
from asgiref.sync import async_to_sync

from agent import bus
from agent.recorder import RunRecorder
from agent.runs import start_run
from core.events import ToolCallStarted
from loopsite.channel_layer import PubSubChannelLayer
from tests.conftest import start_redis
from tests.socket_harness import (
    WAIT,
    free_port,
    no_traceback,
    open_socket,
    session_cookie,
    watch,
)

pytestmark = pytest.mark.django_db(transaction=True)

FAILURE = re.compile(r"channel layer failed to \w+ \((\w+): ([^)]+)\)")


def test_a_broken_channel_layer_leaves_the_page_reading_the_log(start_daphne, alice, broken_redis):
    site = start_daphne(REDIS_URL=broken_redis)
    run = start_run(alice, "Count slowly to 3", model="mock")
    record = RunRecorder(run)
    record(ToolCallStarted(step=1, call_id="c1", tool="run_code", arguments='{"code": "1"}'))
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        frames = [page.recv(timeout=WAIT)]
        while f"call-{run.pk}-1-c1" not in frames[-1]:
            frames.append(page.recv(timeout=WAIT))
        assert any('id="socket-status"' in f and 'data-state="degraded"' in f for f in frames)
        # No wake-up can come; the socket reads the log for the page all the same.
        record(ToolCallStarted(step=2, call_id="c2", tool="run_code", arguments='{"code": "2"}'))
        while f"call-{run.pk}-2-c2" not in frames[-1]:
            frames.append(page.recv(timeout=WAIT))
    failures = FAILURE.findall(site.stderr())
    assert failures, site.stderr()
    assert all(kind and text.strip() for kind, text in failures), failures
    no_traceback(site)


@pytest.fixture
def redis_later(tmp_path) -> Iterator[tuple[int, Callable[[], None]]]:
    """A port with no Redis yet, and a function that starts one there."""
    port = free_port()
    started: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        started.append(start_redis(port, tmp_path))

    yield port, start
    for server in started:
        server.terminate()
        server.wait(timeout=WAIT)


def test_the_page_is_live_again_once_redis_answers(start_daphne, alice, redis_later, settings):
    port, start_redis = redis_later
    url = f"redis://127.0.0.1:{port}/0"
    site = start_daphne(REDIS_URL=url)
    run = start_run(alice, "Count slowly to 3", model="mock")
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        frames = [page.recv(timeout=WAIT)]
        while 'data-state="degraded"' not in frames[-1]:
            frames.append(page.recv(timeout=WAIT))
        start_redis()
        while 'data-state="live"' not in frames[-1]:
            frames.append(page.recv(timeout=WAIT))
        # Live again: the worker's wake-up through Redis brings the next event.
        settings.REDIS_URL = url
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "loopsite.channel_layer.PubSubChannelLayer",
                "CONFIG": {"hosts": [url], "prefix": "asgi"},
            }
        }
        RunRecorder(run)(
            ToolCallStarted(step=1, call_id="c1", tool="run_code", arguments='{"code": "1"}')
        )
        while f"call-{run.pk}-1-c1" not in frames[-1]:
            frames.append(page.recv(timeout=WAIT))
    assert "channel layer answers again" in site.stderr()
    no_traceback(site)


REAL_REDIS = "redis://127.0.0.1:6379/0"


def started(call_id: str, step: int = 1) -> ToolCallStarted:
    return ToolCallStarted(step=step, call_id=call_id, tool="run_code", arguments='{"code": "1"}')


def push(prefix: str, run_id: int, seq: int, events: list[tuple[int, ToolCallStarted]]) -> None:
    """A worker's wake-up through Redis, carrying `events` (seq, event) whatever the log holds."""
    layer = PubSubChannelLayer(hosts=[REAL_REDIS], prefix=prefix)
    rows = [(number, event.kind, event.as_dict()) for number, event in events]
    message = bus.wake_up(run_id, seq, rows)
    assert "events" in message
    async_to_sync(layer.group_send)(f"{prefix}.run-{run_id}", message)


def frames_until(page, text: str) -> list[str]:
    frames = [page.recv(timeout=WAIT)]
    while text not in frames[-1]:
        frames.append(page.recv(timeout=WAIT))
    return frames


def test_a_wake_up_brings_the_next_events_and_a_gap_is_read_from_the_log(start_daphne, alice):
    """Over Redis, a wake-up carries the events it announces: the page that has every event
    before them gets them as they are (an event the log does not hold shows it was not read),
    and a page that lacks one reads the log instead (so what the message says of a later event
    is not what it shows)."""
    prefix = f"test-push-{uuid.uuid4().hex[:8]}"
    site = start_daphne(REDIS_URL=REAL_REDIS, LOOP_CHANNEL_PREFIX=prefix)
    run = start_run(alice, "Count slowly to 3", model="mock")
    record = RunRecorder(run)  # this process has no REDIS_URL: its wake-ups never reach daphne
    record(started("c1"))
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        frames_until(page, f"call-{run.pk}-1-c1")
        record(started("c2", step=2))
        record(started("c3", step=3))
        # Seq 3 announced, but the page has only seq 1: it reads 2 and 3 from the log.
        push(prefix, run.pk, 3, [(3, started("told", step=3))])
        frames = frames_until(page, f"call-{run.pk}-3-c3")
        assert any(f"call-{run.pk}-2-c2" in frame for frame in frames)
        assert not any("told" in frame for frame in frames)
        # Seq 4 follows what the page has: sent as the message carries it.
        push(prefix, run.pk, 4, [(4, started("pushed", step=4))])
        frames = frames_until(page, f"call-{run.pk}-4-pushed")
        assert 'data-seq="4"' in frames[-1]
    assert not run.events.filter(seq=4).exists()
    no_traceback(site)
