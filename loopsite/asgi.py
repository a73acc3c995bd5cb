"""The ASGI entry point daphne serves: HTTP, and the chat page's websocket (authenticated by the
session, and only from this site's own origins: chat/origins.py)."""

import os

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from loopsite import handler
from loopsite.limits import bound_request_bodies

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

# Django's ASGI handler, each request's sync code in one call in a kept thread, which gives the
# request's database connections back to the pool at its end (loopsite/handler.py).
django_application = handler.application()

# In development daphne serves static files itself; in production a web server serves the
# `collectstatic` output from STATIC_ROOT.
http_application = (
    ASGIStaticFilesHandler(django_application) if settings.DEBUG else django_application
)
# daphne buffers a whole request body before any application code runs: bound it in daphne.
bound_request_bodies(settings.LOOP_REQUEST_MAX_BYTES)

from chat.origins import SameOriginValidator  # noqa: E402 (needs the apps loaded)
from chat.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        # channels' stubs want its own pattern type for what Django's path() made (chat.routing).
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))  # type: ignore[arg-type]
        ),
    }
)
