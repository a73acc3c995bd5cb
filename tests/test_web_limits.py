"""The bound on a request's body, through a live daphne: an oversized body is answered 413 from
its headers (or, chunked, the moment it passes the bound), and daphne's memory does not grow by
what was sent; bodies within the bound still reach Django."""

import http.client
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1024 * 1024
UPLOAD = 200 * MIB  # what the attack sent to the login page
LOGIN = "/accounts/login/"


@dataclass
class Daphne:
    port: int
    process: psutil.Process

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=60)

    def rss(self) -> int:
        return self.process.memory_info().rss


@pytest.fixture
def daphne(start_daphne) -> Daphne:
    site = start_daphne()
    return Daphne(site.port, psutil.Process(site.process.pid))


def head(length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST {LOGIN} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{framing}\r\n\r\n"
    ).encode()


def send_all(connection: socket.socket, pieces: Iterator[bytes]) -> int:
    """Send pieces until done or the server closes; how many bytes went."""
    sent = 0
    try:
        for piece in pieces:
            connection.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def reply(connection: socket.socket) -> bytes:
    """Everything the server answered, up to its close."""
    received = b""
    try:
        while data := connection.recv(65536):
            received += data
    except ConnectionResetError:
        pass
    return received


def status(received: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3})", received)
    assert match, received[:200]
    return int(match.group(1))


def identity_body(size: int) -> Iterator[bytes]:
    piece = b"a" * MIB
    for _ in range(size // MIB):
        yield piece


def chunked_body(size: int) -> Iterator[bytes]:
    for piece in identity_body(size):
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    yield b"0\r\n\r\n"


def test_a_declared_length_over_the_limit_is_refused_from_the_headers_alone(daphne):
    with daphne.connect() as connection:
        connection.sendall(head(UPLOAD))  # and not one byte of the body
        received = reply(connection)
    assert status(received) == 413
    limit = settings.LOOP_REQUEST_MAX_BYTES
    assert f"this site accepts at most {limit} bytes".encode() in received


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_200_mb_upload_to_the_login_page_does_not_grow_daphne_s_memory(daphne, framing):
    before = daphne.rss()
    with daphne.connect() as connection:
        if framing == "chunked":
            connection.sendall(head(None))
            sent = send_all(connection, chunked_body(UPLOAD))
        else:
            connection.sendall(head(UPLOAD))
            sent = send_all(connection, identity_body(UPLOAD))
        received = reply(connection)
    assert status(received) == 413
    assert sent < UPLOAD  # daphne stopped reading; the rest never left this side
    # Before the bound, daphne held the whole body: its memory grew by about 200 MB.
    assert daphne.rss() - before < 20 * MIB


def test_a_body_at_the_limit_still_reaches_django_and_one_byte_more_does_not(daphne):
    limit = settings.LOOP_REQUEST_MAX_BYTES
    for size, expected in ((limit, 403), (limit + 1, 413)):  # 403: Django's CSRF check answered
        with daphne.connect() as connection:
            send_all(connection, iter([head(size) + b"a=" + b"b" * (size - 2)]))
            assert status(reply(connection)) == expected, size


def test_logging_in_through_daphne_still_works(daphne):
    from django.contrib.auth.models import User

    User.objects.create_user("alice", password="a long enough passphrase 42")
    connection = http.client.HTTPConnection("127.0.0.1", daphne.port, timeout=60)
    connection.request("GET", LOGIN)
    page = connection.getresponse()
    cookie = page.getheader("Set-Cookie").split(";")[0]
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.read()).group(1)
    form = b"csrfmiddlewaretoken=%s&username=alice&password=a+long+enough+passphrase+42" % token
    connection.request(
        "POST",
        LOGIN,
        body=form,
        headers={"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
    )
    answer = connection.getresponse()
    assert (answer.status, answer.getheader("Location")) == (302, "/")
    connection.close()


def test_a_large_body_waits_on_disk_until_the_application_takes_it(tmp_path):
    """daphne puts a whole body on the application's queue at once; a body Twisted keeps in a
    temporary file stays there, each chunk read only when the application takes it."""
    import asyncio

    from loopsite.limits import BodyOnDisk

    body = tmp_path / "body"
    body.write_bytes(b"a" * 8 + b"b" * 8 + b"c" * 3)
    with body.open("rb") as content:
        queue = asyncio.Queue()
        queue.__class__ = BodyOnDisk
        queue.content, queue.offset = content, 0
        for chunk, more in ((b"a" * 8, True), (b"b" * 8, True), (b"c" * 3, False)):
            queue.put_nowait({"type": "http.request", "body": chunk, "more_body": more})
        assert not any(isinstance(item["body"], bytes) for item in queue._queue)
        taken = [queue.get_nowait()["body"] for _ in range(3)]
    assert taken == [b"a" * 8, b"b" * 8, b"c" * 3]


def test_twisted_does_not_parse_a_multipart_body_into_memory():
    """Twisted would decode a whole multipart body into request.args (13 to 17 times an upload's
    size at the peak), which daphne never reads."""
    from types import SimpleNamespace

    from twisted.web.test.requesthelper import DummyChannel

    from loopsite.limits import BoundedRequest

    channel = DummyChannel()
    channel.factory = SimpleNamespace(
        server=SimpleNamespace(protocol_connected=lambda request: None)
    )
    assert BoundedRequest(channel)._parsePOSTFormSubmission is False
