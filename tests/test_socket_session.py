"""An open socket does not outlive its session: a logout closes the sockets of that session at
once; a session ended some other way (deleted, a changed password) or a user made inactive stops
the stream at the socket's next event. Through a live daphne, as a browser would see it."""

import itertools
import re
import urllib.request
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from websockets.exceptions import ConnectionClosed

from agent.recorder import RunRecorder
from agent.runs import start_run
from chat.consumers import Close
from core.events import ToolCallStarted
from tests.conftest import wait_for
from tests.socket_harness import (
    WAIT,
    LiveSite,
    browser_with,
    closing,
    no_traceback,
    open_socket,
    session_cookie,
    watch,
)

pytestmark = pytest.mark.django_db(transaction=True)

CSRF_TOKEN = re.compile(r'"X-CSRFToken": "([^"]+)"')


def log_out(site: LiveSite, cookie: str) -> None:
    """Press the page's Log out button: POST the logout form with the page's CSRF token."""
    browser = browser_with(cookie)
    page = browser.open(f"{site.url}/", timeout=WAIT).read().decode()
    token = CSRF_TOKEN.search(page).group(1)
    request = urllib.request.Request(  # noqa: S310 (the live site)
        f"{site.url}/accounts/logout/", data=b"", headers={"X-CSRFToken": token}, method="POST"
    )
    assert "/accounts/login/" in browser.open(request, timeout=WAIT).url


def record_steps(run, until: Callable[[], bool]) -> int:
    """Store one event after another, as a worker would, until `until()`; how many it took."""
    recorder = RunRecorder(run)
    for step in itertools.count(1):
        recorder(
            ToolCallStarted(
                step=step, call_id=f"call-{step}", tool="run_code", arguments='{"code": "1"}'
            )
        )
        if until():
            return step
    raise AssertionError("unreachable")


def test_logging_out_closes_that_session_s_sockets_at_once(start_daphne, alice):
    site = start_daphne()
    run = start_run(alice, "Count slowly to 3", model="mock")
    leaving, staying = session_cookie(alice), session_cookie(alice)  # two browsers
    with open_socket(site, leaving) as left, open_socket(site, staying) as kept:
        for page in (left, kept):
            watch(page, run.pk)
            assert f'data-run="{run.pk}"' in page.recv(timeout=WAIT)
        log_out(site, leaving)
        code, frames = closing(left)
        assert code == Close.SIGNED_OUT
        assert "signed out" in frames[-1]  # the page's header says so
        RunRecorder(run)(
            ToolCallStarted(step=1, call_id="call-1", tool="run_code", arguments='{"code": "1"}')
        )
        assert f"call-{run.pk}-1-call-1" in kept.recv(timeout=WAIT)  # the other browser's
    no_traceback(site)


def deactivate(user: User) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def change_password(user: User) -> None:
    user.set_password("a new passphrase nobody else knows 7")
    user.save()


def delete_sessions(user: User) -> None:
    Session.objects.all().delete()


@pytest.mark.parametrize("end", [deactivate, change_password, delete_sessions])
def test_a_session_ended_elsewhere_stops_the_stream(start_daphne, alice, end):
    site = start_daphne()
    run = start_run(alice, "Count slowly to 3", model="mock")
    with open_socket(site, session_cookie(alice)) as page:
        watch(page, run.pk)
        assert f'data-run="{run.pk}"' in page.recv(timeout=WAIT)
        end(alice)
        codes: list[int] = []

        def closed() -> bool:
            try:
                page.recv(timeout=WAIT)
            except ConnectionClosed as ending:
                codes.append(ending.rcvd.code)
                return True
            return False

        record_steps(run, until=closed)
        assert codes == [Close.SIGNED_OUT]
    wait_for(lambda: site.bookkeeping() == {"watched": {}, "groups": []}, "the socket's cleanup")
    no_traceback(site)
