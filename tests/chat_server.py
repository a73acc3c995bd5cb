"""What the fake chat-completions servers share: a real HTTP server on 127.0.0.1 answering from a
script, recording every request, streaming server-sent events, and its faults (delays, drips, cut
and dropped streams, connection resets).

tests/groq_server.py (Groq's API) and tests/openai_server.py (any OpenAI-compatible server) each
fill in what their service does its own way: its paths, its catalogue of models, how it checks a
request before answering from the script, and how it shapes a completion and its chunks. Loop's
client talks to them over a socket, so its timeouts, error mapping and streaming run for real.
"""

import itertools
import json
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

# httpx honours these; the fake must be reached directly, never through a proxy.
_PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake is reached directly, whatever proxy the environment names."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def tool_call(name: str, arguments: Mapping[str, Any] | str, id: str | None = None) -> dict:
    """One entry of `choices[0].message.tool_calls`. Dict arguments are sent as JSON text;
    a string is sent unchanged (to script malformed arguments)."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


@dataclass(frozen=True)
class Completion:
    """A 200 chat completion."""

    text: str | None = None
    tool_calls: tuple[dict, ...] = ()
    usage: tuple[int, int] = (10, 5)
    model: str | None = None  # defaults to the model the request named
    finish_reason: str | None = None  # defaults to "tool_calls" when there are calls, else "stop"
    delay: float = 0.0
    reasoning: str | None = None  # what a reasoning model thought, before its answer
    cut_after: int | None = None  # streamed: the body ends after this many chunks
    drop_after: int | None = None  # the connection is reset after this many chunks
    drip: float = 0.0  # streamed: seconds between chunks


@dataclass(frozen=True)
class SentStream:
    """What the server sent of one streamed reply."""

    chunks: int  # chunks written
    of: int  # chunks the whole reply has, its last (with the finish reason) included
    client_left: bool  # the client closed the connection before the server was done


@dataclass(frozen=True)
class Error:
    """An HTTP error with a JSON body (or raw text, when `body` is a str)."""

    status: int
    body: dict | str
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Reset:
    """No answer at all: the connection is reset as soon as the request is in."""


@dataclass(frozen=True)
class Raw:
    """Bytes written as they are after the status line and headers, piece by piece, until the
    pieces run out or the client leaves (a hostile or broken server: an endless stream, a
    hand-made event stream, a huge body). The body ends when the connection closes."""

    pieces: Iterable[bytes]
    status: int = 200
    content_type: str = "text/event-stream"
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or the raw text when it was not JSON
    at: float  # time.monotonic() when the request arrived

    @property
    def messages(self) -> list[dict]:
        return self.body["messages"]


class FakeChatServer:
    """A threaded HTTP server answering chat completion requests from a script. Subclasses say
    where (`chat_path`, `models_path`), which models it has, and how their service shapes
    errors, refusals, completions and chunks."""

    name = "fake chat server"
    chat_path = "/v1/chat/completions"
    models_path = "/v1/models"

    def __init__(self, models: Sequence[str]) -> None:
        self.models = tuple(models)
        self._script: deque[Completion | Error | Reset | Raw] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self.requests: list[RecordedRequest] = []
        self.streams: list[SentStream] = []
        self.unexpected: list[str] = []  # requests the script had no answer for
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=self.name.replace(" ", "-"),
            daemon=True,
        )

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeChatServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping on a delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FakeChatServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- scripting ---------------------------------------------------------------------------

    def reply(
        self,
        text: str | None = None,
        *,
        tool_calls: Sequence[dict] = (),
        usage: tuple[int, int] = (10, 5),
        model: str | None = None,
        finish_reason: str | None = None,
        delay: float = 0.0,
        reasoning: str | None = None,
        cut_after: int | None = None,
        drop_after: int | None = None,
        drip: float = 0.0,
        times: int = 1,
    ) -> None:
        """Queue a 200 chat completion with text and/or tool calls (ids filled in if None)."""
        for _ in range(times):
            calls = tuple(
                {**call, "id": call.get("id") or f"call_{next(self._ids):04d}"}
                for call in tool_calls
            )
            self._push(
                Completion(
                    text,
                    calls,
                    usage,
                    model,
                    finish_reason,
                    delay,
                    reasoning,
                    cut_after=cut_after,
                    drop_after=drop_after,
                    drip=drip,
                )
            )

    def fail(
        self,
        status: int,
        message: str | None = None,
        *,
        code: str | None = None,
        body: dict | str | None = None,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        times: int = 1,
    ) -> None:
        """Queue an HTTP error. Unless `body` is given, it is the OpenAI shape
        `{"error": {"message", "type", "code"}}`."""
        if body is None:
            body = {
                "error": {
                    "message": message or f"Fake error {status}",
                    "type": self._error_type(status),
                    "code": code,
                }
            }
        for _ in range(times):
            self._push(Error(status, body, dict(headers or {}), delay))

    def reset_connection(self, *, times: int = 1) -> None:
        """Queue a reset of the connection before any answer (a server that crashed on the
        request, or a proxy dropping it)."""
        for _ in range(times):
            self._push(Reset())

    def raw(
        self,
        pieces: Iterable[bytes],
        *,
        status: int = 200,
        content_type: str = "text/event-stream",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue an answer made of these bytes as they are (see `Raw`); `pieces` may be endless,
        and is then written until the client leaves."""
        self._push(Raw(pieces, status, content_type, dict(headers or {})))

    @property
    def pending(self) -> int:
        """How many scripted responses have not been used yet."""
        with self._lock:
            return len(self._script)

    def _sent(self, stream: SentStream) -> None:
        with self._lock:
            self.streams.append(stream)

    def _push(self, response: Completion | Error | Reset | Raw) -> None:
        with self._lock:
            self._script.append(response)

    def _next(self, request: RecordedRequest) -> Completion | Error | Reset | Raw | dict | None:
        with self._lock:
            self.requests.append(request)
            path = request.path.partition("?")[0]
            known = (request.method, path) in {("GET", self.models_path), ("POST", self.chat_path)}
            if known and (denied := self._denied(request)) is not None:
                return denied
            if request.method == "GET" and path == self.models_path:
                # A scripted error (a bad key, an outage) or raw answer answers the listing too.
                if self._script and isinstance(self._script[0], (Error, Raw)):
                    return self._script.popleft()
                return self._model_list()
            if request.method == "POST" and path == self.chat_path:
                refusal = self._refusal(request)
                if refusal is not None:
                    return refusal
                if self._script:
                    return self._script.popleft()
                self.unexpected.append(f"{request.method} {request.path}: no response scripted")
            elif (unknown := self._unknown_path(request)) is not None:
                return unknown
            else:
                self.unexpected.append(f"{request.method} {request.path}: unknown endpoint")
            return None

    # --- what each service does its own way ---------------------------------------------------

    def _error_type(self, status: int) -> str:
        return "invalid_request_error" if status < 500 else "internal_server_error"

    def _denied(self, request: RecordedRequest) -> Error | None:
        """An answer to any request on a known path before anything else (a missing key)."""
        return None

    def _refusal(self, request: RecordedRequest) -> Error | None:
        """The answer to a chat request the service rejects before generating anything."""
        return None

    def _streams(self, request: RecordedRequest) -> bool:
        """Whether the reply to a chat request is streamed: when it asks for it."""
        return bool(request.body.get("stream"))

    def _unknown_path(self, request: RecordedRequest) -> Error | None:
        """The answer to a request for another path, or None: a 418 that fails the test."""
        return None

    def _model_list(self) -> dict:
        raise NotImplementedError

    def _completion_body(self, completion: Completion, request: RecordedRequest) -> dict:
        raise NotImplementedError

    def _chunks(self, completion: Completion, request: RecordedRequest) -> list[dict]:
        raise NotImplementedError

    # --- answering ---------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self._handle()

            def do_GET(self) -> None:
                self._handle()

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace")
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = RecordedRequest(
                    method=self.command,
                    path=self.path,
                    headers={name.lower(): value for name, value in self.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
                response = server._next(request)
                if response is None:
                    self._send(418, {"error": {"message": f"{server.name}: unscripted request"}})
                    return
                if isinstance(response, dict):
                    self._send(200, response)
                    return
                if isinstance(response, Reset):
                    self._reset()
                    return
                if isinstance(response, Raw):
                    self._send_raw(response)
                    return
                if response.delay and server._stopping.wait(response.delay):
                    return  # the server is shutting down: never answer
                if isinstance(response, Completion) and server._streams(request):
                    self._send_stream(server._chunks(response, request), response)
                elif isinstance(response, Completion) and response.drop_after is not None:
                    self._send_headers(200, "application/json")
                    self._reset()
                elif isinstance(response, Completion):
                    self._send(200, server._completion_body(response, request))
                else:
                    self._send(response.status, response.body, response.headers)

            def _send(
                self, status: int, body: dict | str, headers: Mapping[str, str] | None = None
            ) -> None:
                is_text = isinstance(body, str)
                payload = (body if is_text else json.dumps(body)).encode()
                try:
                    self.send_response(status)
                    content_type = "text/plain" if is_text else "application/json"
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.send_header("Connection", "close")
                    self.send_header("x-request-id", f"req_fake{next(server._ids):08d}")
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout): nothing to answer
                self.close_connection = True

            def _send_stream(self, chunks: list[dict], completion: Completion) -> None:
                """Server-sent events, one chunk each, then [DONE]; the connection closes. The
                body ends when it does (no length, no chunked encoding), as a proxy's may."""
                sent, left = 0, False
                stop = min(
                    (n for n in (completion.cut_after, completion.drop_after) if n is not None),
                    default=len(chunks),
                )
                try:
                    self._send_headers(200, "text/event-stream")
                    for chunk in chunks[:stop]:
                        if sent and completion.drip and self._client_left(completion.drip):
                            left = True
                            break
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        sent += 1
                    if completion.drop_after is not None and not left:
                        self._reset()
                    elif completion.cut_after is None and not left:
                        self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    left = True
                server._sent(SentStream(sent, len(chunks), left))
                self.close_connection = True

            def _send_raw(self, response: Raw) -> None:
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", response.content_type)
                    self.send_header("Connection", "close")
                    for name, value in response.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    for piece in response.pieces:
                        if server._stopping.is_set():
                            break
                        self.wfile.write(piece)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a bounded client does
                self.close_connection = True

            def _send_headers(self, status: int, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()

            def _client_left(self, seconds: float) -> bool:
                """Wait `seconds` for the next chunk's turn; True if the client closed the
                connection meanwhile (or the server is stopping)."""
                readable, _, _ = select.select([self.connection], [], [], seconds)
                if server._stopping.is_set():
                    return True
                if not readable:
                    return False
                try:
                    return self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def _reset(self) -> None:
                """Drop the connection as a crashed peer does: a reset, not an orderly close."""
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                os.close(self.connection.detach())

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output clean

        return Handler


def text_pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
