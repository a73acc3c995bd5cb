"""A local HTTP server that receives webhooks as a receiver would: every request kept (headers
and body), answered with the statuses the test scripts, then 200."""

import base64
import contextlib
import hashlib
import hmac
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answered in turn, then 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: Received) -> int:
        with self.lock:
            self.received.append(request)
            return self.statuses.pop(0) if self.statuses else 200


def verified(secret: str, request: Received) -> bool:
    """The Standard Webhooks check, written here from the convention, not from Loop's code."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = b".".join(
        [
            request.headers["webhook-id"].encode(),
            request.headers["webhook-timestamp"].encode(),
            request.body,
        ]
    )
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    offered = [part.removeprefix("v1,") for part in request.headers["webhook-signature"].split()]
    return any(hmac.compare_digest(expected, signature) for signature in offered)


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver listening on a free local port until the block ends (a test module's fixture
    yields it)."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            request = Received(
                {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
            )
            status = receiver.answer(request)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
