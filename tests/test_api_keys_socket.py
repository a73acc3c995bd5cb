"""A key is not a login to the chat's socket: the page's websocket takes the session alone, and
a handshake that shows a working key as `Authorization: Bearer` (and no session) is refused, as
an anonymous one is, through the real ASGI application."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from api.keys import create_key, key_for
from api.models import ALL_SCOPES
from loopsite.asgi import application
from tests.test_consumer import (  # noqa: F401 (an autouse fixture, and the socket's helpers)
    _no_connection_outlives_its_test,
    socket,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_a_key_on_the_handshake_is_not_a_login(alice):
    made = await database_sync_to_async(create_key)(alice, "socket", ALL_SCOPES)
    assert await database_sync_to_async(key_for)(made.secret) is not None
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {made.secret}".encode()),
    ]
    communicator = WebsocketCommunicator(application, "/ws/runs/", headers=headers)
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()

    # The same handshake with alice's session is let in: the refusal above was the key's.
    logged_in = await socket(alice)
    connected, _ = await logged_in.connect()
    assert connected
    await logged_in.disconnect()
