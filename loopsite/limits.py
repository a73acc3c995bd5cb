"""The bound on a request's body, enforced inside daphne before the body is buffered.

daphne hands a request to the ASGI application only once Twisted has received the whole body
(into a temporary file), and then puts all of it, 8 KiB at a time, on the application's queue in
one go: a 200 MB upload held 200 MB of daphne's memory before any Django code could refuse it.
So the bound lives in daphne's request object: a declared `Content-Length` over the limit is
answered 413 from the headers alone, and a chunked body is cut off the moment it passes the limit.
"""

from daphne import http_protocol

REFUSAL = b"Request body too large: this site accepts at most %d bytes.\n"


class BoundedRequest(http_protocol.WebRequest):
    """daphne's request, refusing a body larger than `max_body` bytes before storing it."""

    max_body = 0  # set by bound_request_bodies
    received = 0
    refused = False

    def gotLength(self, length: int | None) -> None:
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


def bound_request_bodies(max_bytes: int) -> None:
    """Make daphne's HTTP factory build BoundedRequests (it looks `WebRequest` up per connection;
    daphne offers no setting for this)."""
    BoundedRequest.max_body = max_bytes
    http_protocol.WebRequest = BoundedRequest
