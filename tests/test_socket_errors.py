"""The socket's error paths, through a live daphne with raw frames: every malformed, oversized or
odd message closes the socket with a valid code of its own, nothing is logged as a traceback,
and the socket's cleanup runs (no group membership or NOTIFY watch is left behind)."""

import json

import pytest
from django.contrib.auth.models import User

from agent.models import AgentRun
from agent.runs import start_run
from chat.consumers import MAX_MESSAGE_CHARS, MAX_WATCHED_RUNS, Close
from tests.conftest import wait_for
from tests.socket_harness import (
    WAIT,
    LiveSite,
    close_code,
    closing,
    no_traceback,
    open_socket,
    session_cookie,
    watch,
)

pytestmark = pytest.mark.django_db(transaction=True)

BAD_MESSAGES = [
    "{",
    '{"after": 1e400}',
    '{"after": "abc"}',
    '{"watch": RUN, "after": 1e400}',
    '{"watch": RUN, "after": "abc"}',
    '{"watch": RUN, "after": -1}',
    '{"watch": RUN, "after": 2147483648}',
    '{"watch": true}',
    '{"watch": "RUN"}',
    '{"watch": 1e400}',
    '{"watch": 99999999999999999999999}',
    '{"watch": RUN, "after": 0, "also": 1}',
    "[RUN]",
    "null",
    "[" * 1000,
    "1" * 1000,
]


def nothing_left(site: LiveSite) -> None:
    """The sockets' cleanup ran in daphne: no run watched, no group with a member."""
    wait_for(lambda: site.bookkeeping() == {"watched": {}, "groups": []}, "the socket's cleanup")


def test_a_bad_message_closes_the_socket_with_its_own_code(start_daphne, alice):
    site = start_daphne()
    run = start_run(alice, "What is 1 + 1?", model="mock")
    cookie = session_cookie(alice)
    for message in BAD_MESSAGES:
        with open_socket(site, cookie) as page:
            watch(page, run.pk)  # one run watched, so cleanup has something to undo
            assert f'data-run="{run.pk}"' in page.recv(timeout=WAIT)
            assert site.bookkeeping()["watched"] == {str(run.pk): 1}
            page.send(message.replace("RUN", str(run.pk)))
            code, frames = closing(page)
            assert code == Close.BAD_MESSAGE, message
            assert 'data-state="closed"' in frames[-1]  # the page is told why, in its header
            assert "■ not live: " in frames[-1]
        nothing_left(site)
    no_traceback(site)


def test_an_oversized_message_closes_the_socket(start_daphne, alice):
    site = start_daphne()
    with open_socket(site, session_cookie(alice)) as page:
        page.send(json.dumps({"watch": 1, "pad": "x" * MAX_MESSAGE_CHARS}))
        assert close_code(page) == Close.TOO_BIG
    with open_socket(site, session_cookie(alice)) as page:
        page.send(b"\xff" * 100_000)  # bytes, not even UTF-8
        assert close_code(page) == Close.TOO_BIG
    nothing_left(site)
    no_traceback(site)


def test_another_user_s_run_closes_the_socket(start_daphne, alice, bob):
    site = start_daphne()
    run = start_run(bob, "What is 1 + 1?", model="mock")
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        assert close_code(page) == Close.NOT_FOUND
    nothing_left(site)
    no_traceback(site)


def test_the_run_after_the_last_one_a_socket_may_watch_closes_it(start_daphne, alice, settings):
    settings.LOOP_USER_ACTIVE_RUNS = MAX_WATCHED_RUNS + 1
    site = start_daphne()
    runs = [start_run(alice, f"Task {n}", model="mock") for n in range(MAX_WATCHED_RUNS + 1)]
    with open_socket(site, session_cookie(alice)) as page:
        for run in runs[:MAX_WATCHED_RUNS]:
            watch(page, run.pk)
            assert f'data-run="{run.pk}"' in page.recv(timeout=WAIT)
        watch(page, runs[0].pk, after=0)  # watching a run again is no run more
        assert f'data-run="{runs[0].pk}"' in page.recv(timeout=WAIT)
        assert len(site.bookkeeping()["watched"]) == MAX_WATCHED_RUNS
        watch(page, runs[-1].pk)
        assert close_code(page) == Close.TOO_MANY_RUNS
    nothing_left(site)
    no_traceback(site)


def test_a_socket_whose_user_is_deleted_closes(start_daphne, alice):
    site = start_daphne()
    run = start_run(alice, "What is 1 + 1?", model="mock")
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        page.recv(timeout=WAIT)
        AgentRun.objects.filter(pk=run.pk).delete()
        User.objects.filter(pk=alice.pk).delete()
        watch(page, run.pk)
        assert close_code(page) in (Close.SIGNED_OUT, Close.NOT_FOUND)
    nothing_left(site)
    no_traceback(site)
