"""The bound on a request's body, enforced inside daphne before the body is buffered, and what
daphne holds of a large body.

daphne hands a request to the ASGI application only once Twisted has received the whole body
(into a temporary file, past 100 KB), and then puts all of it, 8 KiB at a time, on the
application's queue in one go: a 200 MB upload held 200 MB of daphne's memory before any Django
code could refuse it. So the bound lives in daphne's request object: a declared `Content-Length`
over the limit is answered 413 from the headers alone, and a chunked body is cut off the moment it
passes the limit.

Two paths have a bound of their own: `POST /files/upload/` and the API's `POST /api/v1/files`
carry up to LOOP_UPLOAD_MAX_FILES files of up to LOOP_UPLOAD_MAX_BYTES each, so their body may be
that many files' worth plus LOOP_REQUEST_MAX_BYTES for the form around them. The path is read
from the request line, the only part of the request known when the headers end. For such a body
two more things keep daphne's memory flat (bench/files.py): Twisted does not decode a multipart
body into `request.args` (it would, in memory, many times over, and daphne never reads it), and a
body in a temporary file stays there until the application takes each chunk (BodyOnDisk);
workspace/uploads.py then streams the files to the workspace.
"""

import asyncio
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from daphne import http_protocol
from django.conf import settings

REFUSAL = b"Request body too large: this site accepts at most %d bytes.\n"


class BoundedRequest(http_protocol.WebRequest):  # type: ignore[misc]  # daphne has no types
    """daphne's request, refusing a body larger than `max_body` bytes before storing it."""

    max_body = 0  # set by bound_request_bodies
    upload_max_body = 0
    received = 0
    refused = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Twisted parses a multipart body into request.args, all of it in memory (13 to 17 times
        # the upload's size at the peak): daphne never reads request.args.
        self._parsePOSTFormSubmission = False

    @property
    def application_queue(self) -> asyncio.Queue[dict[str, Any]] | None:
        return self.__dict__.get("_application_queue")

    @application_queue.setter
    def application_queue(self, queue: asyncio.Queue[dict[str, Any]] | None) -> None:
        """daphne makes the queue, then puts the whole body on it: keep a large body on disk."""
        if type(queue) is asyncio.Queue and on_disk(self.content):
            queue.__class__ = BodyOnDisk
            if isinstance(queue, BodyOnDisk):  # as it now is
                queue.content, queue.offset = self.content, 0
        self.__dict__["_application_queue"] = queue

    def gotLength(self, length: int | None) -> None:
        self.max_body = self.bound_for(getattr(self.channel, "_path", b""))
        if length is not None and length > self.max_body:
            self.refuse()
            # Twisted reads this header after gotLength: no "100 Continue" after the refusal.
            self.requestHeaders.removeHeader(b"Expect")
        super().gotLength(0 if self.refused else length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.received += len(data)
        if self.received > self.max_body:
            self.refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        # What was still in the read buffer when the connection was closed must not reach Django.
        if not self.refused:
            super().requestReceived(command, path, version)

    def bound_for(self, target: bytes) -> int:
        """The bound on the body sent to this request target (path, then maybe a query)."""
        path = unquote(target.split(b"?", 1)[0].decode("latin-1"))
        return self.upload_max_body if path in UPLOAD_PATHS else type(self).max_body

    def refuse(self) -> None:
        """Answer 413 and close: the rest of the body is never read."""
        self.refused = True
        body = REFUSAL % self.max_body
        head = (
            b"HTTP/1.1 413 Content Too Large\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        self.channel.transport.write(head + body)
        self.channel.loseConnection()


# The Files panel's upload (fixed by issue 18: links, docs and scripts rely on it) and the API's.
UPLOAD_PATHS = {"/files/upload/", "/api/v1/files"}


def upload_bound(max_bytes: int) -> int:
    """The bound on an upload's body: LOOP_UPLOAD_MAX_FILES files, and a form's worth beside."""
    return settings.LOOP_UPLOAD_MAX_BYTES * settings.LOOP_UPLOAD_MAX_FILES + max_bytes


def bound_request_bodies(max_bytes: int, upload_max_bytes: int | None = None) -> None:
    """Make daphne's HTTP factory build BoundedRequests (it looks `WebRequest` up per connection;
    daphne offers no setting for this). Uploads get `upload_max_bytes`, by default upload_bound."""
    BoundedRequest.max_body = max_bytes
    BoundedRequest.upload_max_body = (
        upload_bound(max_bytes) if upload_max_bytes is None else upload_max_bytes
    )
    http_protocol.WebRequest = BoundedRequest


def on_disk(content: Any) -> bool:
    """Whether Twisted keeps this body in a temporary file (a large one) rather than in memory."""
    try:
        content.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False
    return True


@dataclass(frozen=True)
class _OnDisk:
    offset: int
    size: int


class BodyOnDisk(asyncio.Queue[dict[str, Any]]):
    """The application's queue of one request with a large body: of each chunk daphne puts on
    it, only where it lies in Twisted's temporary file is kept; the chunk is read when the
    application takes it (Queue.get calls _get), so the body is never all in memory at once."""

    content: Any
    offset: int

    def put_nowait(self, item: dict[str, Any]) -> None:
        if item.get("type") == "http.request" and item.get("body"):
            size = len(item["body"])
            item = {**item, "body": _OnDisk(self.offset, size)}
            self.offset += size
        super().put_nowait(item)

    def _get(self) -> dict[str, Any]:
        item = super()._get()
        body = item.get("body")
        if isinstance(body, _OnDisk):
            if self.content.closed:  # the client went away: Twisted closed the file
                return {"type": "http.disconnect"}
            item = {**item, "body": os.pread(self.content.fileno(), body.size, body.offset)}
        return item
