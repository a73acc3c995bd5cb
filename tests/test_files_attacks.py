"""The Files panel attacked, by its own person and by an outsider: names the disk or the panel
cannot take, a hard link to something outside the workspace, a temporary file gone before it is
named, encoded traversal in the URL, markup and quotes in names, parts that lie about their size,
bodies without a length, and a client that goes away while daphne holds its body on disk."""

import asyncio
import errno
import os
from pathlib import Path

import pytest
from django.test import Client

from loopsite.limits import BodyOnDisk
from tests.test_files_upload import leftovers, multipart, send
from tools.context import context_for
from workspace import browse

pytestmark = pytest.mark.django_db

UPLOAD = "/files/upload/"


@pytest.fixture
def workspace(alice, workspaces, client) -> Path:
    client.force_login(alice)
    return context_for(alice).workspace


def upload(client: Client, *parts: tuple[str, str | None, bytes]):
    return send(client, multipart(*parts), Accept="application/json")


# Names the disk or the panel cannot take ---------------------------------------------------------


def test_a_name_that_is_not_utf8_does_not_break_the_panel(client, workspace):
    """run_code may leave a file whose name is not UTF-8: the panel listed it as a lone
    surrogate, which no response can encode, and every page of the folder was a 500."""
    os.close(os.open(bytes(workspace) + b"/report\xff.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    (workspace / "kept.txt").write_text("kept")
    page = client.get("/files/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "report\\xff.txt" in body  # shown escaped, as what it is
    assert 'href="/files/view/kept.txt"' in body  # and the rest of the folder as ever
    assert "/files/view/report" not in body  # no link the panel would only refuse
    assert "/files/raw/report" not in body


@pytest.mark.parametrize(
    "name",
    ["invoice\u202etxt.exe", "two\nlines.txt", "bell\x07.txt"],
)
def test_a_name_the_panel_refuses_is_listed_escaped_without_links(client, workspace, name):
    """A snippet's file named with a bidi control read as another name in the list
    ('invoiceexe.txt'), and its links led only to refusals."""
    (workspace / name).write_text("x")
    body = client.get("/files/").content.decode()
    assert name not in body
    assert name.encode("unicode_escape").decode() in body
    assert "/files/view/" not in body
    assert "/files/raw/" not in body
    assert 'name="path"' not in body


@pytest.mark.parametrize(
    "name", ["a" * 256, "é" * 128, "😀" * 64 + ".txt"], ids=["ascii", "2-byte", "4-byte"]
)
def test_a_name_too_long_for_the_disk_is_refused_with_a_reason(client, workspace, name):
    response = upload(client, ("file", name, b"x"))
    assert response.status_code == 400
    (refusal,) = response.json()["refused"]
    assert "over the 255 bytes a name may have" in refusal
    assert os.listdir(workspace) == []


@pytest.mark.parametrize(
    "name", ["a" * 255, "é" * 127, "😀" * 62 + ".txt"], ids=["ascii", "2-byte", "4-byte"]
)
def test_a_long_name_the_disk_takes_is_stored(client, workspace, name):
    """The temporary file's name kept 200 characters of the name: 200 'é' are 400 bytes, past
    the 255 a name may have, and the upload was a 500."""
    response = upload(client, ("file", name, b"payload"))
    assert response.status_code == 200, response.content
    assert (workspace / name).read_bytes() == b"payload"
    assert leftovers(workspace) == []


def test_keeping_both_when_the_copy_s_name_would_be_too_long_is_refused(client, workspace):
    name = "a" * 251 + ".txt"  # 255 bytes: 'name (2).txt' has no room
    (workspace / name).write_bytes(b"old")
    response = send(client, multipart(("on_clash", None, b"keep"), ("file", name, b"new")),
                    Accept="application/json")  # fmt: skip
    assert response.status_code == 400
    (refusal,) = response.json()["refused"]
    assert refusal.startswith(f"{name} was not stored:")
    assert (workspace / name).read_bytes() == b"old"
    assert leftovers(workspace) == []


def test_an_upload_being_written_has_no_name_a_snippet_or_a_listing_could_meet(workspace):
    """Its file was a temporary name in the workspace, which a snippet could remove, or fill
    the quota with files named like it that the panel hid; now it has no name until stored."""
    root = browse.open_workspace(workspace)
    try:
        incoming = browse.begin_upload(root)
        incoming.write(b"a,b\n")
        incoming.finish()
        assert os.listdir(workspace) == []
        stored = browse.store_upload(incoming, "", "data.csv")
        assert stored == browse.Stored("data.csv", "Uploaded data.csv (4 bytes).")
        incoming.discard()
    finally:
        os.close(root)
    assert os.listdir(workspace) == ["data.csv"]
    assert (workspace / "data.csv").read_bytes() == b"a,b\n"


def test_a_write_the_disk_refuses_loses_that_file_alone(client, workspace, monkeypatch):
    """A full disk mid-part was a 500 for the whole upload; now that part is refused, its
    temporary file deleted, and the other parts are stored."""
    write = browse.Incoming.write

    def failing(incoming: browse.Incoming, data: bytes) -> None:
        if data.startswith(b"x"):  # full.bin's
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(incoming, data)

    monkeypatch.setattr(browse.Incoming, "write", failing)
    response = upload(client, ("file", "full.bin", b"x" * 10), ("file", "ok.txt", b"ok"))
    assert response.status_code == 400
    assert response.json() == {
        "done": ["Uploaded ok.txt (2 bytes)."],
        "refused": ["full.bin was not stored: No space left on device."],
        "stored": ["ok.txt"],
    }
    assert os.listdir(workspace) == ["ok.txt"]


def test_names_like_the_folder_itself_are_refused(client, workspace):
    for name in (".", "./", "a/.."):
        response = upload(client, ("file", name, b"x"))
        assert response.status_code == 400, name
        assert response.json()["refused"]
    assert os.listdir(workspace) == []


# Links -------------------------------------------------------------------------------------------


def test_a_hard_link_to_a_file_outside_the_workspace_is_never_opened(client, workspace, tmp_path):
    """A symlink is never followed; a hard link is the file itself, so the panel served a file
    from outside the workspace under a workspace name. A file with other names is not opened."""
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.link(secret, workspace / "linked.txt")
    for url in ("/files/raw/linked.txt", "/files/view/linked.txt"):
        response = client.get(url)
        assert response.status_code == 400, url
        assert "hard link" in response.content.decode()
        assert b"host secret" not in response.content
    client.post("/files/delete/", {"path": "linked.txt"})  # deleting removes only the name
    assert not (workspace / "linked.txt").exists()
    assert secret.read_text() == "host secret"


def test_an_upload_into_a_symlinked_folder_is_refused(client, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspace / "inbox")
    response = send(client, multipart(("dir", None, b"inbox"), ("file", "a.txt", b"a")),
                    Accept="application/json")  # fmt: skip
    assert response.status_code == 400
    assert "symlink" in response.json()["refused"][0]
    assert os.listdir(outside) == []
    assert leftovers(workspace) == []


# Traversal in the URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "%2e%2e/%2e%2e/etc/passwd",
        "..%2f..%2fetc%2fpasswd",
        "%2Fetc%2Fpasswd",
        "..%5c..%5cetc%5cpasswd",
        "a%00b",
        "notes/%2e%2e/%2e%2e/x",
    ],
)
def test_encoded_traversal_in_the_url_is_refused(client, workspace, path):
    (workspace / "notes").mkdir()
    for view in ("raw", "view"):
        response = client.get(f"/files/{view}/{path}")
        assert response.status_code in (400, 404), (view, path)
        assert b"root:" not in response.content


# Markup and quotes in names ----------------------------------------------------------------------


def test_markup_and_quotes_in_a_name_are_escaped_in_the_list_and_the_view(client, workspace):
    name = "<img src=x onerror=alert(1)>\"'.txt"
    (workspace / name).write_text("<script>alert(2)</script>")
    listing = client.get("/files/").content.decode()
    assert "<img src=x" not in listing
    assert "&lt;img src=x onerror=alert(1)&gt;&quot;&#x27;.txt" in listing
    view = client.get(f"/files/view/{name.replace('<', '%3C').replace('>', '%3E')}")
    assert view.status_code == 200
    assert "<img src=x" not in view.content.decode()
    assert "<script>alert(2)" not in view.content.decode()


def test_quotes_in_a_name_cannot_forge_the_download_s_headers(client, workspace):
    name = 'a"; filename="evil.html'
    (workspace / name).write_text("<script>alert(1)</script>")
    response = client.get("/files/raw/a%22%3B%20filename%3D%22evil.html")
    assert response["Content-Disposition"] == 'attachment; filename="a\\"; filename=\\"evil.html"'
    assert response["Content-Type"] == "application/octet-stream"
    assert response["X-Content-Type-Options"] == "nosniff"


# Quota and size ----------------------------------------------------------------------------------


def test_a_part_that_declares_a_small_size_is_measured_by_what_it_sends(
    client, workspace, settings
):
    settings.LOOP_UPLOAD_MAX_BYTES = 100
    body = multipart(("file", "liar.bin", b"x" * 5000), raw_header="")
    body = body.replace(b"Content-Type: application/octet-stream", b"Content-Length: 1\r\n"
                        b"Content-Type: application/octet-stream", 1)  # fmt: skip
    response = send(client, body, Accept="application/json")
    assert "over the 100-byte limit per file" in response.json()["refused"][0]
    assert os.listdir(workspace) == []


def test_a_body_without_a_length_stores_nothing(alice, workspace):
    """A chunked body has no Content-Length: Django's parser reads nothing of it."""
    from django.test import RequestFactory

    from workspace.views import upload as upload_view

    request = RequestFactory().post(
        UPLOAD, data=multipart(("file", "a.txt", b"a")), content_type="multipart/form-data; "
        "boundary=LoopBoundary7MA4YWxk", headers={"Accept": "application/json"},
    )  # fmt: skip
    del request.META["CONTENT_LENGTH"]
    request.user = alice
    request._dont_enforce_csrf_checks = True
    response = upload_view(request)
    assert response.status_code == 400
    assert os.listdir(workspace) == []


def test_more_parts_than_django_counts_leave_no_temporary_file(client, workspace, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 3
    response = upload(client, *[("file", f"{n}.txt", b"n") for n in range(5)])
    assert response.status_code == 400
    assert os.listdir(workspace) == []


def test_a_wrong_csrf_token_stores_nothing_and_leaves_no_temporary_file(alice, workspace):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    strict.get("/files/")
    form = multipart(("csrfmiddlewaretoken", None, b"x" * 64), ("file", "a.txt", b"a" * 70_000))
    assert send(strict, form).status_code == 403
    assert (
        send(strict, multipart(("file", "b.txt", b"b")), **{"X-CSRFToken": "y" * 32}).status_code
        == 403
    )
    assert os.listdir(workspace) == []


# A client gone while daphne holds its body -------------------------------------------------------


def test_a_body_on_disk_after_the_client_went_away_is_a_disconnect(tmp_path):
    """Twisted closes its temporary file when the connection is lost: the chunks still queued
    are answered as a disconnect, never read from a closed (or reused) descriptor."""
    body = tmp_path / "body"
    body.write_bytes(b"a" * 16)
    content = body.open("rb")
    queue = asyncio.Queue()
    queue.__class__ = BodyOnDisk
    queue.content, queue.offset = content, 0
    queue.put_nowait({"type": "http.request", "body": b"a" * 8, "more_body": True})
    queue.put_nowait({"type": "http.request", "body": b"a" * 8, "more_body": False})
    assert queue.get_nowait()["body"] == b"a" * 8
    content.close()
    assert queue.get_nowait() == {"type": "http.disconnect"}
