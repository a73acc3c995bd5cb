"""daphne's bound on request bodies lets an upload through: POST /files/upload/ (and the API's
POST /api/v1/files) may carry
LOOP_UPLOAD_MAX_FILES files' worth (and a form's worth beside), every other path stays bounded
by LOOP_REQUEST_MAX_BYTES, both refused from the headers alone."""

import contextlib
import socket

import pytest

from loopsite.limits import UPLOAD_PATHS, BoundedRequest, upload_bound
from tests.test_web_limits import reply, status

pytestmark = pytest.mark.django_db(transaction=True)

REQUEST_MAX = 10_000
UPLOAD_MAX = 20_000
UPLOAD_FILES = 2
UPLOAD_BOUND = UPLOAD_MAX * UPLOAD_FILES + REQUEST_MAX


def test_the_upload_bound_is_that_many_files_and_a_form(settings):
    settings.LOOP_UPLOAD_MAX_BYTES, settings.LOOP_UPLOAD_MAX_FILES = UPLOAD_MAX, UPLOAD_FILES
    assert upload_bound(REQUEST_MAX) == UPLOAD_BOUND
    assert {"/files/upload/", "/api/v1/files"} == UPLOAD_PATHS


@pytest.mark.parametrize(
    ("target", "bound"),
    [
        (b"/files/upload/", "upload"),
        (b"/files/upload/?next=/", "upload"),
        (b"/files/%75pload/", "upload"),  # the same view, as Django decodes it
        (b"/api/v1/files", "upload"),
        (b"/api/v1/files?path=notes&on_clash=replace", "upload"),
        (b"/api/v1/files/notes.txt", "request"),
        (b"/files/upload", "request"),
        (b"/files/", "request"),
        (b"/files/upload/x", "request"),
        (b"/accounts/login/?x=/files/upload/", "request"),
        (b"", "request"),
    ],
)
def test_only_the_upload_path_gets_the_upload_bound(monkeypatch, target, bound):
    monkeypatch.setattr(BoundedRequest, "max_body", REQUEST_MAX)
    monkeypatch.setattr(BoundedRequest, "upload_max_body", UPLOAD_BOUND)
    request = BoundedRequest.__new__(BoundedRequest)
    expected = UPLOAD_BOUND if bound == "upload" else REQUEST_MAX
    assert request.bound_for(target) == expected


BOUNDARY = "LoopLimitBoundary"


def upload_body(size: int) -> bytes:
    """A multipart body of exactly `size` bytes: one file part, padded."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    return head + b"x" * (size - len(head) - len(tail)) + tail


def post(port: int, path: str, size: int) -> bytes:
    """POST a multipart body of `size` bytes (all of it, unless refused); what came back."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        connection.sendall(head)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(upload_body(size))
        return reply(connection)


def test_through_daphne_an_upload_may_be_larger_than_any_other_request(start_daphne):
    site = start_daphne(
        LOOP_REQUEST_MAX_BYTES=str(REQUEST_MAX),
        LOOP_UPLOAD_MAX_BYTES=str(UPLOAD_MAX),
        LOOP_UPLOAD_MAX_FILES=str(UPLOAD_FILES),
    )
    # Within the upload bound: Django answers (a stranger is sent to log in).
    assert status(post(site.port, "/files/upload/", UPLOAD_BOUND)) == 302
    refused = post(site.port, "/files/upload/", UPLOAD_BOUND + 1)
    assert status(refused) == 413
    assert f"at most {UPLOAD_BOUND} bytes".encode() in refused
    # The API's upload: within the bound, the API answers (no key: 401).
    assert status(post(site.port, "/api/v1/files", UPLOAD_BOUND)) == 401
    assert status(post(site.port, "/api/v1/files", UPLOAD_BOUND + 1)) == 413
    # Every other path keeps the request bound.
    assert status(post(site.port, "/accounts/login/", REQUEST_MAX)) == 403  # CSRF answered
    assert status(post(site.port, "/accounts/login/", REQUEST_MAX + 1)) == 413
    assert status(post(site.port, "/files/delete/", REQUEST_MAX + 1)) == 413
