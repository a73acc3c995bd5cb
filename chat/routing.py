from django.urls import path

from chat.consumers import RunConsumer

# channels routes an ASGI application by Django's path(), typed for views only.
websocket_urlpatterns = [path("ws/runs/", RunConsumer.as_asgi())]  # type: ignore[arg-type]
