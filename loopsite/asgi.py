"""The ASGI entry point daphne serves: HTTP now, websockets when the chat page arrives."""

import os

from channels.routing import ProtocolTypeRouter
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

django_application = get_asgi_application()

# In development daphne serves static files itself; in production a web server serves the
# `collectstatic` output from STATIC_ROOT.
http_application = (
    ASGIStaticFilesHandler(django_application) if settings.DEBUG else django_application
)

application = ProtocolTypeRouter({"http": http_application})
