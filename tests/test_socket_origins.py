"""Cross-site websocket hijacking: a page on another origin of the same host, opened in the
victim's browser, sends the victim's cookie with its socket; only the site's own origins (and
CSRF_TRUSTED_ORIGINS) may open it, by the rule of Django's CSRF check."""

import pytest
from websockets.exceptions import InvalidStatus

from agent.runs import start_run
from tests.socket_harness import free_port, open_socket, session_cookie, watch

pytestmark = pytest.mark.django_db(transaction=True)


def refused(site, cookie: str, origin: str) -> bool:
    try:
        with open_socket(site, cookie, origin):
            pass
    except InvalidStatus as refusal:
        return refusal.response.status_code == 403
    return False


def reads_its_run(site, cookie: str, run_id: int) -> bool:
    with open_socket(site, cookie) as page:
        watch(page, run_id)
        return f'data-run="{run_id}"' in page.recv(timeout=60)


def test_a_page_on_another_port_of_the_same_host_cannot_open_the_socket(start_daphne, alice):
    site = start_daphne()
    cookie = session_cookie(alice)
    run = start_run(alice, "What is 1 + 1?", model="mock")
    attacker = f"http://127.0.0.1:{free_port()}"
    assert refused(site, cookie, attacker)
    assert refused(site, cookie, f"https://127.0.0.1:{site.port}")  # another scheme
    assert refused(site, cookie, "")  # no Origin at all
    assert reads_its_run(site, cookie, run.pk)  # the site's own page gets in


def test_allowing_every_host_does_not_allow_every_origin(start_daphne, alice):
    site = start_daphne(ALLOWED_HOSTS="*")
    cookie = session_cookie(alice)
    assert refused(site, cookie, f"http://127.0.0.1:{free_port()}")
    assert refused(site, cookie, "http://evil.example")
    assert reads_its_run(site, cookie, start_run(alice, "What is 1 + 1?", model="mock").pk)


def test_a_csrf_trusted_origin_may_open_the_socket(start_daphne, alice):
    trusted = f"http://127.0.0.1:{free_port()}"
    site = start_daphne(CSRF_TRUSTED_ORIGINS=f"{trusted},https://*.example.com")
    cookie = session_cookie(alice)
    for origin in (trusted, "https://chat.example.com"):
        with open_socket(site, cookie, origin) as page:
            assert page.state.name == "OPEN"
    assert refused(site, cookie, "http://chat.example.com")  # a trusted name, but not scheme
    assert refused(site, cookie, f"http://127.0.0.1:{free_port()}")
