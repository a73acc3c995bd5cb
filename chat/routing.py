from django.urls import path

from chat.consumers import RunConsumer

websocket_urlpatterns = [path("ws/runs/", RunConsumer.as_asgi())]
