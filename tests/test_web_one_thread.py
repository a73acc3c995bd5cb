"""Under ASGI a page's sync code runs in one thread call (loopsite/handler.py): no middleware hook
hops to a thread and back, the view runs in the thread the middleware ran in, the threads are kept
from one request to the next, and a request gives its database connections back at its end."""

import threading

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.core.asgi import get_asgi_application
from django.db import connections
from django.utils.deprecation import MiddlewareMixin

from chat import views
from loopsite import handler

pytestmark = pytest.mark.django_db(transaction=True)

HOST = [(b"host", b"localhost")]


def counting_async_hooks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The middleware that will run async (each of its hooks a hop to a thread and back)."""
    hops: list[str] = []
    async_call = MiddlewareMixin.__acall__

    async def counted(self, request):
        hops.append(type(self).__name__)
        return await async_call(self, request)

    monkeypatch.setattr(MiddlewareMixin, "__acall__", counted)
    return hops


async def login_page(application) -> None:
    page = HttpCommunicator(application, "GET", "/accounts/login/", headers=HOST)
    assert (await page.get_response())["status"] == 200


@pytest.mark.asyncio
async def test_no_middleware_hook_hops_threads(monkeypatch):
    hops = counting_async_hooks(monkeypatch)
    await login_page(handler.application())  # builds the middleware chain anew, as daphne does
    assert hops == []


@pytest.mark.asyncio
async def test_under_django_s_own_handler_they_would_hop(monkeypatch):
    """The test above can fail: Django's handler builds the same chain async (below the one
    middleware that is sync only, rights.middleware's, whose outer ones it then runs sync)."""
    hops = counting_async_hooks(monkeypatch)
    await login_page(get_asgi_application())
    assert "MessageMiddleware" in hops


def signed_in_cookie(user) -> list[tuple[bytes, bytes]]:
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return [*HOST, (b"cookie", f"sessionid={session.session_key}".encode())]


@pytest.mark.asyncio
async def test_a_page_runs_in_one_kept_thread_and_gives_its_connection_back(alice, monkeypatch):
    """Two pages one after the other: each view runs in the thread its middleware ran in, the
    second in the same thread as the first (no thread started per request), and after each the
    thread holds no database connection (the pool has it back)."""
    threads: list[tuple[int, int]] = []  # (the middleware's, the view's) of each page
    chat_page = views.chat_page

    def watched_page(request, *args, **kwargs):
        threads.append((request.middleware_thread, threading.get_ident()))
        return chat_page(request, *args, **kwargs)

    monkeypatch.setattr(views, "chat_page", watched_page)
    application = handler.application()
    application._middleware_chain = ThreadOfMiddleware(application._middleware_chain)
    cookie = await database_sync_to_async(signed_in_cookie)(alice)
    for _ in range(2):
        page = HttpCommunicator(application, "GET", "/", headers=cookie)
        assert (await page.get_response())["status"] == 200
        (thread,) = application.idle
        assert thread.submit(lambda: connections["default"].connection).result() is None
    assert len(threads) == 2
    assert threads[0][0] == threads[0][1] == threads[1][0] == threads[1][1]


class ThreadOfMiddleware(MiddlewareMixin):
    """Notes the thread the middleware chain runs in, on the request."""

    def process_request(self, request):
        request.middleware_thread = threading.get_ident()
