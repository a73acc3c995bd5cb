"""An ASGI application for browser tests: Loop's, as tests/socket_harness.py serves it, except
that a task's send waits at the door until the test opens it. A send is then on its way for as
long as the test needs to type, with no sleep and no race."""

import asyncio
from typing import Any

from tests.socket_harness import probe_application

OPEN_PATH = "/_open_sends/"
APPLICATION = "tests.send_gate:held_sends"

opened = asyncio.Event()  # once open, every send after goes straight through


async def held_sends(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == OPEN_PATH:
        opened.set()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].endswith("/send/"):
        await opened.wait()
    await probe_application(scope, receive, send)
