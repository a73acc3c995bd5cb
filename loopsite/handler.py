"""The web's handler of HTTP requests under ASGI: a request's sync code runs in one thread call.

Django's own ASGI handler, for a page of Loop (sync views, sync middleware), hops between the
event loop and a thread five times: `request_started`'s receivers, the middleware chain, the view
(the chain's bottom is async in Django's handler), the response's close, and Loop's closing of
the request's database connections; and it starts a thread of the request's own and joins it at
the end. Each hop is a `call_soon_threadsafe` and a wake-up of the loop, and with the thread's
start and join that was about half of daphne's CPU for a page (docs/engine.md, "Where a run's
CPU goes"). Here the middleware chain is built sync, as under WSGI, and one call in a thread does
what those did: signals, middleware, view, close, and the connections given back to the pool.

The threads are kept: a request borrows an idle one (a one-thread executor) or, if none is idle,
starts another, so no request waits for another's thread, as with Django's thread per request.
A request's thread-sensitive calls (`sync_to_async(thread_sensitive=True)`, say the export's
chunks, which read with the view's connection) go to its own thread, as under Django's handler.
"""

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import connections
from django.http import FileResponse, HttpResponseBase
from django.urls import set_script_prefix

# Idle request threads kept for the next requests; more start while more requests are served at
# once, and those beyond this many end when their request is done.
IDLE_THREADS = 16


class OneCallHandler(ASGIHandler):
    """Django's ASGIHandler, but a request's sync code runs in one call in one kept thread."""

    def __init__(self) -> None:
        super(ASGIHandler, self).__init__()  # BaseHandler's: the chain is built below, sync
        self.load_middleware(is_async=False)
        self.idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread = self.idle.pop() if self.idle else new_thread()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            if len(self.idle) < IDLE_THREADS:
                self.idle.append(thread)
            else:
                thread.shutdown(wait=False)

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            body = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            response = await sync_to_async(self.respond, thread_sensitive=True)(scope, body)
            if response.streaming:
                await self.stream(response, receive, send)
            else:
                await self.send_response(response, send)
        finally:
            body.close()

    def respond(self, scope: Any, body: Any) -> HttpResponseBase:
        """In the request's thread: the response, and unless it streams, the request done
        (`request_finished` sent, the thread's database connections given back)."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body)
        if request is None:
            if error_response is None:  # never: create_request gives one or the other
                raise RuntimeError("Django's create_request gave no request and no response.")
            response = error_response
        else:
            response = self.get_response(request)
            # As Django's own handler marks it: an attribute django-stubs does not declare.
            response._handler_class = self.__class__  # type: ignore[attr-defined]
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size  # daphne sends it in pieces itself
        if not response.streaming:
            finish(response)
        return response

    async def stream(self, response: HttpResponseBase, receive: Any, send: Any) -> None:
        """A streaming response, sent as Django's handler sends it: stopped if the client goes
        away, then closed in the request's thread."""
        sending = asyncio.ensure_future(self.send_response(response, send))
        listening = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait([sending, listening], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (listening, sending):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RequestAborted):
                    await task
            await sync_to_async(finish, thread_sensitive=True)(response)


def finish(response: HttpResponseBase) -> None:
    """What ends a request, in its thread: the response's closers and `request_finished` (which
    closes the connections Django would keep), then every connection the thread borrowed."""
    try:
        response.close()
    finally:
        connections.close_all()


def new_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="loop-request")


def application() -> OneCallHandler:
    """As django.core.asgi.get_asgi_application(), with this handler."""
    django.setup(set_prefix=False)
    return OneCallHandler()
