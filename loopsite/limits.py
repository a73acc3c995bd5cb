"""The bound on a request's body, enforced inside daphne before the body is buffered.

daphne hands a request to the ASGI application only once Twisted has received the whole body
(into a temporary file), and then puts all of it, 8 KiB at a time, on the application's queue in
one go: a 200 MB upload held 200 MB of daphne's memory before any Django code could refuse it.
So the bound lives in daphne's request object: a declared `Content-Length` over the limit is
answered 413 from the headers alone, and a chunked body is cut off the moment it passes the limit.

One path has a bound of its own: `POST /files/upload/` carries up to LOOP_UPLOAD_MAX_FILES files
of up to LOOP_UPLOAD_MAX_BYTES each, so its body may be that many files' worth plus
LOOP_REQUEST_MAX_BYTES for the form around them (chat/uploads.py streams the files to disk; what
daphne itself holds, it holds in a temporary file). The path is read from the request line, the
only part of the request known when the headers end.
"""

from urllib.parse import unquote

from daphne import http_protocol
from django.conf import settings

REFUSAL = b"Request body too large: this site accepts at most %d bytes.\n"


class BoundedRequest(http_protocol.WebRequest):
    """daphne's request, refusing a body larger than `max_body` bytes before storing it."""

    max_body = 0  # set by bound_request_bodies
    upload_max_body = 0
    received = 0
    refused = False

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


UPLOAD_PATHS = {"/files/upload/"}  # fixed by issue 18: links, docs and scripts rely on it


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
