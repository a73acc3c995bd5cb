"""Under ASGI a page's middleware runs in one sync call: Django runs a middleware async when the
one below it is async and it can be, and its own middleware then hops to a thread and back for
each of its hooks (about ten hops a page, most of a page's CPU in daphne). The last middleware,
sync only, keeps them all sync."""

import pytest
from channels.testing import HttpCommunicator
from django.core.asgi import get_asgi_application
from django.utils.deprecation import MiddlewareMixin

pytestmark = pytest.mark.django_db(transaction=True)

HOST = [(b"host", b"localhost")]


async def hops_of_a_page(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The middleware that ran async (each hook a hop) while the login page was served."""
    hops: list[str] = []
    async_call = MiddlewareMixin.__acall__

    async def counted(self, request):
        hops.append(type(self).__name__)
        return await async_call(self, request)

    monkeypatch.setattr(MiddlewareMixin, "__acall__", counted)
    application = get_asgi_application()  # builds the middleware chain anew, as daphne does
    page = HttpCommunicator(application, "GET", "/accounts/login/", headers=HOST)
    assert (await page.get_response())["status"] == 200
    return hops


@pytest.mark.asyncio
async def test_no_middleware_hook_hops_threads(monkeypatch):
    assert await hops_of_a_page(monkeypatch) == []


@pytest.mark.asyncio
async def test_without_the_last_middleware_they_would_hop(monkeypatch, settings):
    """The test above can fail: the same page, the chain built without it."""
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if not m.endswith("OneThreadMiddleware")]
    assert "SessionMiddleware" in await hops_of_a_page(monkeypatch)
