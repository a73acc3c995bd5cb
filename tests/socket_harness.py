"""Shared by the test_socket_* files: a live daphne serving Loop's real ASGI application, and a
websockets client that speaks to it as a browser (or an attacker's page) would.

daphne serves `probe_application`: the real application, plus one page of its own that tells what
the socket bookkeeping of daphne's process holds (the NOTIFY listener's watch counts and the
in-memory channel layer's groups), so a test can prove that a closed socket leaves nothing behind.
"""

import contextlib
import http.cookiejar
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from loopsite.asgi import application
from tests.conftest import PROJECT_DIR, child_environment, wait_for

PROBE_PATH = "/_socket_probe/"
WAIT = 60  # seconds: a bound that turns a hang into a failure, not a timing assertion
DAPHNE_MAX_MESSAGE = 2**20  # daphne's (autobahn's) default limit on one message


async def probe_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == PROBE_PATH:
        body = json.dumps(await bookkeeping()).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    await application(scope, receive, send)


async def bookkeeping() -> dict[str, Any]:
    from channels.layers import get_channel_layer

    from agent import bus

    groups = getattr(get_channel_layer(), "groups", {})
    return {
        "watched": {str(run): count for run, count in bus.listener().watched.items() if count},
        "groups": sorted(name for name, members in groups.items() if members),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class LiveSite:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.url

    def bookkeeping(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + PROBE_PATH, timeout=WAIT) as response:  # noqa: S310
            return json.loads(response.read())

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def daphnes(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., LiveSite]]:
    """For a test's `start_daphne` fixture: start daphne on a free port with the given
    environment (serving `app`, an ASGI application's import path); each is stopped after the
    test."""
    started: list[LiveSite] = []

    def start(
        port: int = 0, app: str = "tests.socket_harness:probe_application", **env: str
    ) -> LiveSite:
        port = port or free_port()
        log = tmp_path / f"daphne-{port}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(port),
             app],
            cwd=PROJECT_DIR,
            env=child_environment(**worker_env, **env),
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )  # fmt: skip
        site = LiveSite(port, process, log)
        started.append(site)
        wait_for(lambda: answers(site), "daphne to answer")
        return site

    yield start
    for site in started:
        site.process.terminate()
        site.process.wait(timeout=60)


@contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server that accepts every connection and never says a word; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # the server closed at the end of the test
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(timeout=WAIT)
        for connection in held:
            connection.close()


class DatabaseGate:
    """A TCP door to the suite's PostgreSQL (its Unix socket) that a test can shut: a child
    pointed at `url` reaches the real database through it, and while it is shut, finds the
    database away as after a restart (its connections dropped, a new one closed at once)."""

    def __init__(self, socket_path: str, database: str, user: str) -> None:
        self.socket_path = socket_path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"postgresql://{user}@127.0.0.1:{self.server.getsockname()[1]}/{database}"
        self.open = True
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client = self.server.accept()[0]
            except OSError:  # closed at the end of the test
                return
            with self.lock:
                if not self.open:
                    client.close()
                    continue
                upstream = socket.socket(socket.AF_UNIX)
                upstream.connect(self.socket_path)
                self.pairs.append((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(source, sink), daemon=True).start()

    def shut(self) -> None:
        with self.lock:
            self.open = False
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for end in pair:
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def reopen(self) -> None:
        with self.lock:
            self.open = True

    def close(self) -> None:
        self.shut()
        self.server.close()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either end closes; then close both."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


def answers(site: LiveSite) -> bool:
    if site.process.poll() is not None:
        raise AssertionError(f"daphne exited: {site.stderr()}")
    try:
        with urllib.request.urlopen(site.url + PROBE_PATH, timeout=5) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def browser_with(cookie: str) -> urllib.request.OpenerDirector:
    """An HTTP client holding the session cookie, as the logged-in browser would."""
    jar = http.cookiejar.CookieJar()
    name, value = cookie.split("=", 1)
    jar.set_cookie(http.cookiejar.Cookie(
        0, name, value, None, False, "127.0.0.1", False, False, "/", True, False, None, False,
        None, None, {},
    ))  # fmt: skip
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))


def open_socket(site: LiveSite, cookie: str, origin: str | None = None) -> ClientConnection:
    """A socket to the site's /ws/runs/ with the cookie, from `origin` (the site's own by
    default), taking messages up to daphne's own limit only."""
    headers = {"Cookie": cookie}
    if origin is None:
        origin = site.origin
    return connect(
        f"ws://127.0.0.1:{site.port}/ws/runs/",
        origin=origin or None,
        additional_headers=headers,
        max_size=DAPHNE_MAX_MESSAGE,
        open_timeout=WAIT,
    )


def watch(page: ClientConnection, run_id: int, after: int = 0) -> None:
    page.send(json.dumps({"watch": run_id, "after": after}))


def closing(page: ClientConnection) -> tuple[int | None, list[str]]:
    """Read until the server closes the socket: the code it closed with (None: no close frame),
    and the frames it sent before."""
    frames: list[str] = []
    try:
        while True:
            frames.append(page.recv(timeout=WAIT))
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd is not None else None), frames


def close_code(page: ClientConnection) -> int | None:
    return closing(page)[0]


def no_traceback(site: LiveSite) -> None:
    log = site.stderr()
    assert "Traceback" not in log, log
    assert not re.search(r"\b1011\b", log), log  # a word of its own: not part of a port
