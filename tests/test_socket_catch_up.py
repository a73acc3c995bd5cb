"""A catch-up bigger than daphne's 1 MiB message limit: the socket sends what a page missed in
bounded frames, each card with a huge text shortened with a link to the whole text, so the page
gets every event and the socket stays open. Through a live daphne, with a client that, like a
browser, takes no message over 1 MiB."""

import re
import urllib.error

import pytest

from agent.models import AgentRun
from agent.recorder import RunRecorder
from agent.runs import start_run
from agent.selectors import events_of
from chat.rendering import page_cards
from chat.stream import FRAME_BYTES
from chat.texts import SHORT_TEXT_CHARS
from core.events import (
    ModelReplied,
    RunFinished,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
)
from core.llm import ToolCall
from core.results import ToolStatus
from tests.socket_harness import (
    DAPHNE_MAX_MESSAGE,
    WAIT,
    LiveSite,
    browser_with,
    no_traceback,
    open_socket,
    session_cookie,
    watch,
)

pytestmark = pytest.mark.django_db(transaction=True)

SEQ_MARKER = re.compile(r'id="run-\d+-seq" data-run="\d+" data-seq="(\d+)"( data-watch)?')
FOLLOWS = re.compile(r'id="run-\d+-seq" [^>]*data-after="(\d+)"')
CARD_ID = re.compile(r'<(?:article|div) class="card [^"]*" id="([^"]+)"')
WHOLE_TEXT = re.compile(r'<a href="(/runs/\d+/events/\d+/\w+/)"')
# Texts that grow when escaped and rendered: HTML's special characters, a Markdown list.
TOOL_RESULT = ('<tag a="1"> & more\n' * 60_000)[:1_000_000]
ANSWER = ("- an <item> & another\n" * 60_000)[:1_200_000]
SMALL_RESULT = TOOL_RESULT[:9_000]  # shown whole: 119 of them make a catch-up of some 2 MB
STEPS = 120  # more events than one read of the log takes


def huge_run(user) -> AgentRun:
    run = start_run(user, "Read the big file", model="mock")
    record = RunRecorder(run)
    for step in range(1, STEPS + 1):
        arguments = '{"path": "big.txt"}'
        call = {"step": step, "call_id": f"c{step}", "tool": "read_file", "arguments": arguments}
        record(ToolCallStarted(**call))
        result = TOOL_RESULT if step == 1 else SMALL_RESULT
        record(ToolCallFinished(**call, status=ToolStatus.OK, text=result, duration=0.1))
        record(
            ModelReplied(
                step=step,
                text="Read it.",
                tool_calls=[ToolCall(id=f"c{step}", name="read_file", arguments=arguments)],
                prompt_tokens=10,
                completion_tokens=5,
            )
        )
    record(RunFinished(status=RunStatus.SUCCEEDED, answer=ANSWER))
    return run


def catch_up(page, after: int = 0, frames: int | None = None) -> list[str]:
    """Frames until the run's finished marker (or `frames` of them)."""
    received: list[str] = []
    while frames is None or len(received) < frames:
        received.append(page.recv(timeout=WAIT))
        markers = SEQ_MARKER.findall(received[-1])
        if markers and not markers[-1][1]:  # a marker without data-watch: the run is over
            break
    return received


def last_seq(frames: list[str]) -> int:
    return int(SEQ_MARKER.findall(frames[-1])[-1][0])


def test_a_catch_up_over_a_mebibyte_arrives_whole_in_bounded_frames(start_daphne, alice, bob):
    site = start_daphne()
    run = huge_run(alice)
    cookie = session_cookie(alice)
    with open_socket(site, cookie) as page:
        watch(page, run.pk)
        first = catch_up(page, frames=1)
    # Cut off after its first frame, the page asks for the rest and gets it: no frame twice.
    with open_socket(site, cookie) as page:
        watch(page, run.pk, after=last_seq(first))
        frames = first + catch_up(page)
        watch(page, run.pk, after=last_seq(frames))  # the socket is still open, and answers
        assert f'data-seq="{last_seq(frames)}"' in page.recv(timeout=WAIT)

    assert sum(len(frame.encode()) for frame in frames) > 2 * DAPHNE_MAX_MESSAGE
    assert max(len(frame.encode()) for frame in frames) <= FRAME_BYTES
    events = events_of(run)
    assert last_seq(frames) == events[-1].seq
    # Each frame says the seq it follows, the one the frame before ended with: a page whose
    # turn lacks events before it leaves it out (static/chat/chat.js).
    follows = [int(FOLLOWS.findall(frame)[-1]) for frame in frames]
    assert follows == [0] + [last_seq([frame]) for frame in frames[:-1]]
    pushed = [card_id for frame in frames for card_id in CARD_ID.findall(frame)]
    expected = [card.id for card in page_cards(run.pk, events)]
    running = [f"call-{run.pk}-{step}-c{step}" for step in range(1, STEPS + 1)]
    assert sorted(pushed) == sorted(expected + running)  # each card once (a call's twice)

    links = [link for frame in frames for link in WHOLE_TEXT.findall(frame)]
    assert len(links) == 2  # the big tool result, and the answer
    assert f"the first {SHORT_TEXT_CHARS:,} of {len(ANSWER):,} characters" in frames[-1]
    assert whole_text(site, cookie, links[-1]) == (200, ANSWER)
    assert whole_text(site, cookie, links[0]) == (200, TOOL_RESULT)
    assert whole_text(site, session_cookie(bob), links[-1])[0] == 404
    no_traceback(site)


def whole_text(site: LiveSite, cookie: str, path: str) -> tuple[int, str]:
    browser = browser_with(cookie)
    try:
        with browser.open(site.url + path, timeout=WAIT) as response:
            assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refusal:
        return refusal.code, ""
