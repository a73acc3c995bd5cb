"""Uploads to the Files panel: one part or several, into a folder, within the per-file limit and
the workspace quota, hostile names refused with a reason, a clash refused, replaced or kept both,
CSRF enforced, streamed to disk chunk by chunk, and at once visible to the agent's file tools."""

import io
import json
import os
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http.multipartparser import MultiPartParser
from django.test import Client

from tools.base import ToolRegistry
from tools.context import context_for
from tools.files import LIST_FILES, READ_FILE
from workspace import browse
from workspace.uploads import OriginalNameParser, WorkspaceUploadHandler

pytestmark = pytest.mark.django_db

UPLOAD = "/files/upload/"
BOUNDARY = "LoopBoundary7MA4YWxk"
CSV = b"city,people\nParis,2100000\nLyon,520000\n"


@pytest.fixture
def workspace(alice, workspaces, client) -> Path:
    client.force_login(alice)
    return context_for(alice).workspace


def multipart(*parts: tuple[str, str | None, bytes], raw_header: str = "") -> bytes:
    """A multipart body written by hand, so a file name reaches the server exactly as given."""
    body = b""
    for field, filename, data in parts:
        disposition = f'form-data; name="{field}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}{raw_header}\r\n".encode()
        body += (
            b"Content-Type: application/octet-stream\r\n\r\n" if filename is not None else b"\r\n"
        )
        body += data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def send(client: Client, body: bytes, **headers: str):
    return client.post(
        UPLOAD, data=body, content_type=f"multipart/form-data; boundary={BOUNDARY}", headers=headers
    )


def ask_json(client: Client, *parts: tuple[str, str | None, bytes]):
    return send(client, multipart(*parts), Accept="application/json")


TEMP_NAME = re.compile(r"\..*\.[0-9a-f]{16}\.tmp", re.DOTALL)  # workspace.confined.temp_name's


def leftovers(workspace: Path) -> list[str]:
    """Temporary files (a replacing upload's, write_file's) left anywhere in the workspace."""
    return [
        name for _, _, names in os.walk(workspace) for name in names if TEMP_NAME.fullmatch(name)
    ]


def test_one_file_is_stored_under_its_name_with_a_message(client, workspace):
    response = client.post(UPLOAD, {"file": SimpleUploadedFile("data.csv", CSV)}, follow=True)
    assert (workspace / "data.csv").read_bytes() == CSV
    assert f"Uploaded data.csv ({len(CSV)} bytes)." in response.content.decode()
    assert response.redirect_chain[-1][0] == "/files/"
    assert leftovers(workspace) == []


def test_several_files_in_one_request_into_a_folder(client, workspace):
    (workspace / "inbox").mkdir()
    files = [SimpleUploadedFile("a.txt", b"aaa"), SimpleUploadedFile("b.txt", b"bb")]
    response = client.post(UPLOAD, {"file": files, "dir": "inbox"})
    assert response["Location"] == "/files/?dir=inbox"
    assert (workspace / "inbox/a.txt").read_bytes() == b"aaa"
    assert (workspace / "inbox/b.txt").read_bytes() == b"bb"


def test_an_upload_by_htmx_answers_the_panel_with_a_message_per_file(client, workspace):
    files = [SimpleUploadedFile("a.txt", b"a"), SimpleUploadedFile("b.txt", b"b")]
    page = client.post(UPLOAD, {"file": files}, headers={"HX-Request": "true"})
    body = page.content.decode()
    assert body.lstrip().startswith('<section class="files-panel"')
    assert "Uploaded a.txt (1 bytes)." in body
    assert "Uploaded b.txt (1 bytes)." in body


def test_a_script_gets_json(client, workspace):
    response = ask_json(client, ("file", "x.txt", b"x"))
    assert response.status_code == 200
    assert response.json() == {
        "done": ["Uploaded x.txt (1 bytes)."],
        "refused": [],
        "stored": ["x.txt"],
    }


def test_a_folder_that_does_not_exist_is_refused_and_nothing_is_left(client, workspace):
    response = send(client, multipart(("dir", None, b"nowhere"), ("file", "a.txt", b"a")),
                    Accept="application/json")  # fmt: skip
    assert response.status_code == 404
    assert "nowhere is not in your workspace" in response.json()["refused"][0]
    assert leftovers(workspace) == []
    assert os.listdir(workspace) == []


def test_a_request_without_a_file_is_answered(client, workspace):
    response = send(client, multipart(("dir", None, b"")), Accept="application/json")
    assert response.status_code == 400
    assert "No file was sent" in response.json()["refused"][0]


def test_a_file_over_the_per_file_limit_is_refused_and_the_others_are_stored(
    client, workspace, settings
):
    settings.LOOP_UPLOAD_MAX_BYTES = 100
    response = ask_json(client, ("file", "big.bin", b"x" * 101), ("file", "ok.txt", b"x" * 100))
    assert response.status_code == 400
    assert response.json() == {
        "done": ["Uploaded ok.txt (100 bytes)."],
        "refused": ["big.bin was not stored: it is over the 100-byte limit per file."],
        "stored": ["ok.txt"],
    }
    assert sorted(os.listdir(workspace)) == ["ok.txt"]


def test_an_upload_over_the_quota_is_refused_and_loses_nothing_else(client, workspace, settings):
    settings.LOOP_WORKSPACE_MAX_BYTES = 1000
    (workspace / "kept.txt").write_bytes(b"k" * 600)
    response = ask_json(client, ("file", "big.bin", b"x" * 500), ("file", "small.txt", b"s" * 300))
    assert response.status_code == 400
    refused = response.json()["refused"]
    assert len(refused) == 1
    assert refused[0].startswith("big.bin was not stored: it would take your workspace past")
    assert response.json()["done"] == ["Uploaded small.txt (300 bytes)."]
    assert (workspace / "kept.txt").read_bytes() == b"k" * 600
    assert sorted(os.listdir(workspace)) == ["kept.txt", "small.txt"]


def test_the_quota_counts_files_too(client, workspace, settings):
    settings.LOOP_WORKSPACE_MAX_FILES = 1
    (workspace / "one.txt").write_bytes(b"1")
    response = ask_json(client, ("file", "two.txt", b"2"))
    assert "past its quota" in response.json()["refused"][0]
    assert os.listdir(workspace) == ["one.txt"]


def test_more_files_than_one_upload_may_carry_are_refused(client, workspace, settings):
    settings.LOOP_UPLOAD_MAX_FILES = 2
    response = ask_json(client, *[("file", f"{n}.txt", b"n") for n in range(3)])
    assert response.json()["refused"] == ["2.txt was not stored: at most 2 files per upload."]
    assert sorted(os.listdir(workspace)) == ["0.txt", "1.txt"]


def test_a_part_not_named_file_is_ignored_with_a_message(client, workspace):
    response = ask_json(client, ("attachment", "a.txt", b"a"))
    assert "send files as parts named 'file'" in response.json()["refused"][0]
    assert os.listdir(workspace) == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../evil.txt", "'..'"),
        ("..", "'..'"),
        ("../../../../tmp/evil.txt", "'..'"),
        ("/etc/evil.txt", "absolute"),
        ("a\x00b.txt", "NUL"),
        ("a\x1bb.txt", "control character"),
        ("a\x85b.txt", "control character"),
        ("invoice\u202etxt.exe", "bidirectional control U+202E"),
        ("a\u2066b.txt", "bidirectional control U+2066"),
        ("data\u200b.csv", "invisible character U+200B"),
        ("a\\b.txt", "backslash"),
        ("C:evil.txt", "drive letter"),
        ("notes/evil.txt", "is a path"),
        ("\uff0e\uff0e\uff3c\uff0e\uff0e\uff3cevil.bat", "reads as '.."),
        ("\uff23\uff1a\uff3cWindows\uff3cevil.dll", "reads as 'C:"),
        ("..\uff0fup.txt", "reads as '../up.txt'"),
        ("x" * 256, "over the 255 bytes"),
    ],
)
def test_a_hostile_name_is_refused_with_its_reason_and_nothing_is_stored(
    client, workspace, workspaces, name, reason
):
    (workspace / "notes").mkdir()
    # /tmp is shared with every other process (xdist's other workers too): what appears there
    # meanwhile counts only if the upload could have named it.
    before = set(workspaces.parent.glob("*")) | set(workspaces.glob("*"))
    response = ask_json(client, ("file", name, b"payload"))
    assert response.status_code == 400
    (refusal,) = response.json()["refused"]
    assert reason in refusal
    assert os.listdir(workspace) == ["notes"]
    assert os.listdir(workspace / "notes") == []
    made = set(workspaces.parent.glob("*")) | set(workspaces.glob("*"))
    assert not {path for path in made - before if path.name in name or path.parent == workspaces}
    assert not Path("/tmp/evil.txt").exists()


def test_a_name_sent_percent_encoded_is_judged_decoded(client, workspace):
    body = multipart(("file", None, b"payload")).replace(
        b'name="file"', b"name=\"file\"; filename*=UTF-8''..%2F..%2Fevil.txt", 1
    )
    body = body.replace(b"\r\n\r\npayload", b"\r\nContent-Type: text/plain\r\n\r\npayload", 1)
    response = send(client, body, Accept="application/json")
    assert "'..'" in response.json()["refused"][0]
    assert os.listdir(workspace) == []


def test_a_clash_is_refused_asking_which(client, workspace):
    (workspace / "data.csv").write_bytes(b"old")
    response = ask_json(client, ("file", "data.csv", CSV))
    assert response.status_code == 409
    assert "already exists: replace it, or keep both" in response.json()["refused"][0]
    assert (workspace / "data.csv").read_bytes() == b"old"
    assert leftovers(workspace) == []


def test_a_clash_with_replace_replaces(client, workspace):
    (workspace / "data.csv").write_bytes(b"old")
    response = send(client, multipart(("on_clash", None, b"replace"), ("file", "data.csv", CSV)),
                    Accept="application/json")  # fmt: skip
    assert response.json()["done"] == [f"Replaced data.csv ({len(CSV)} bytes)."]
    assert (workspace / "data.csv").read_bytes() == CSV


def test_a_name_sent_in_nfd_is_stored_in_nfc_and_clashes_with_its_nfc_twin(client, workspace):
    """A Mac sends "café.txt" decomposed: it was a second entry that looked the same."""
    composed, decomposed = "caf\u00e9.txt", "cafe\u0301.txt"
    first = ask_json(client, ("file", decomposed, b"one"))
    assert first.json()["done"] == [f"Uploaded {composed} (3 bytes)."]
    again = ask_json(client, ("file", decomposed, b"two"))
    assert again.status_code == 409
    assert os.listdir(workspace) == [composed]
    assert (workspace / composed).read_bytes() == b"one"
    assert leftovers(workspace) == []


def test_a_replacing_upload_leaves_no_temporary_file(client, workspace):
    (workspace / "data.csv").write_bytes(b"old")
    send(client, multipart(("on_clash", None, b"replace"), ("file", "data.csv", CSV)))
    assert os.listdir(workspace) == ["data.csv"]


def test_a_clash_with_keep_keeps_both(client, workspace):
    (workspace / "data.csv").write_bytes(b"old")
    (workspace / "data (2).csv").write_bytes(b"older copy")
    files = {"file": SimpleUploadedFile("data.csv", CSV), "on_clash": "keep"}
    client.post(UPLOAD, files)
    assert (workspace / "data.csv").read_bytes() == b"old"
    assert (workspace / "data (2).csv").read_bytes() == b"older copy"
    assert (workspace / "data (3).csv").read_bytes() == CSV


def test_an_upload_never_replaces_a_folder_or_a_symlink(client, workspace, tmp_path):
    (workspace / "folder").mkdir()
    target = tmp_path / "outside.txt"
    target.write_bytes(b"outside")
    os.symlink(target, workspace / "link.txt")
    for name in ("folder", "link.txt"):
        response = send(client, multipart(("on_clash", None, b"replace"), ("file", name, b"x")),
                        Accept="application/json")  # fmt: skip
        assert "which an upload never replaces" in response.json()["refused"][0]
    assert target.read_bytes() == b"outside"
    assert (workspace / "folder").is_dir()


def test_an_unknown_clash_choice_is_refused(client, workspace):
    response = send(client, multipart(("on_clash", None, b"merge"), ("file", "a.txt", b"a")),
                    Accept="application/json")  # fmt: skip
    assert "on_clash must be one of replace, keep" in response.json()["refused"][0]


def test_the_agent_sees_an_uploaded_file_at_once(client, alice, workspace):
    client.post(UPLOAD, {"file": SimpleUploadedFile("data.csv", CSV)})
    registry = ToolRegistry([LIST_FILES, READ_FILE])
    context = context_for(alice)
    listed = registry.dispatch("list_files", json.dumps({"path": "."}), context)
    assert f"data.csv ({len(CSV)} bytes)" in listed.text
    read = registry.dispatch("read_file", json.dumps({"path": "data.csv"}), context)
    assert read.text == CSV.decode()


def test_a_multipart_body_that_cannot_be_read_is_a_400(client, workspace):
    body = multipart(("file", "a.txt", b"a"))
    response = client.post(UPLOAD, data=body, content_type="multipart/form-data")  # no boundary
    assert response.status_code == 400
    assert "The upload could not be read" in response.content.decode()
    assert os.listdir(workspace) == []


def test_a_truncated_multipart_body_stores_nothing_and_says_so(client, workspace):
    response = send(client, f"--{BOUNDARY}\r\nContent-Disposition: form-data".encode(),
                    Accept="application/json")  # fmt: skip
    assert response.status_code == 400
    assert "No file was sent" in response.json()["refused"][0]
    assert os.listdir(workspace) == []


def test_a_stranger_is_sent_to_log_in_and_nothing_is_read(workspaces):
    response = send(Client(), multipart(("file", "a.txt", b"a")))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    assert list(workspaces.iterdir()) == []


def test_another_persons_folder_does_not_exist_for_you(client, workspace, bob):
    (workspace / "private").mkdir()
    client.force_login(bob)
    response = send(client, multipart(("dir", None, b"private"), ("file", "x.txt", b"x")),
                    Accept="application/json")  # fmt: skip
    assert response.status_code == 404
    assert os.listdir(workspace / "private") == []
    assert leftovers(context_for(bob).workspace) == []


# CSRF ---------------------------------------------------------------------------------------------


@pytest.fixture
def strict(alice, workspace) -> Client:
    """A client that, like a browser, must send the CSRF token."""
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    strict.get("/files/")  # sets the CSRF cookie
    return strict


def test_an_upload_without_the_csrf_token_is_refused_and_nothing_is_kept(strict, workspace):
    response = send(strict, multipart(("file", "a.txt", b"a")))
    assert response.status_code == 403
    assert os.listdir(workspace) == []  # the streamed part was deleted, not named


def test_an_upload_with_the_csrf_token_in_the_form_or_the_header_is_stored(strict, workspace):
    token = strict.cookies["csrftoken"].value
    form = multipart(("csrfmiddlewaretoken", None, token.encode()), ("file", "a.txt", b"a"))
    assert send(strict, form).status_code == 302
    assert (
        send(strict, multipart(("file", "b.txt", b"b")), **{"X-CSRFToken": token}).status_code
        == 302
    )
    assert sorted(os.listdir(workspace)) == ["a.txt", "b.txt"]


def test_delete_without_the_csrf_token_is_refused(strict, workspace):
    (workspace / "a.txt").write_bytes(b"a")
    assert strict.post("/files/delete/", {"path": "a.txt"}).status_code == 403
    assert (workspace / "a.txt").exists()
    token = strict.cookies["csrftoken"].value
    strict.post("/files/delete/", {"path": "a.txt"}, headers={"X-CSRFToken": token})
    assert not (workspace / "a.txt").exists()


# Streaming ---------------------------------------------------------------------------------------


def test_each_chunk_is_on_disk_before_the_next_is_read_never_the_whole_file(
    workspace, monkeypatch, settings
):
    """The handler writes every chunk to the temporary file as it comes: after each chunk the file
    on disk has grown by exactly that chunk, and no chunk is larger than the parser's chunk size."""
    settings.LOOP_UPLOAD_MAX_BYTES = 4 * 1024 * 1024
    data = os.urandom(3 * 1024 * 1024 + 17)
    body = multipart(("file", "big.bin", data))
    handler = WorkspaceUploadHandler(workspace)
    seen: list[tuple[int, int, int]] = []  # (chunk size, bytes given so far, size on disk)
    write = browse.Incoming.write

    def recording(incoming: browse.Incoming, chunk: bytes) -> None:
        write(incoming, chunk)
        on_disk = os.fstat(incoming.handle).st_size
        seen.append((len(chunk), incoming.written, on_disk))

    monkeypatch.setattr(browse.Incoming, "write", recording)
    meta = {
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}",
        "CONTENT_LENGTH": str(len(body)),
    }
    _, files = OriginalNameParser(meta, io.BytesIO(body), [handler]).parse()
    assert isinstance(OriginalNameParser(meta, io.BytesIO(b""), [handler]), MultiPartParser)
    assert len(seen) > 40  # many chunks, each written as it came
    assert max(size for size, _, _ in seen) <= handler.chunk_size
    assert all(given == on_disk for _, given, on_disk in seen)
    (streamed,) = files.getlist("file")
    assert streamed.size == len(data)
    assert (
        browse.store_upload(streamed.incoming, "", "big.bin").note
        == f"Uploaded big.bin ({len(data):,} bytes)."
    )
    handler.discard()
    assert (workspace / "big.bin").read_bytes() == data


def test_a_part_over_the_limit_stops_being_written_at_the_limit(workspace, monkeypatch, settings):
    settings.LOOP_UPLOAD_MAX_BYTES = 200 * 1024
    body = multipart(("file", "huge.bin", b"z" * (2 * 1024 * 1024)))
    handler = WorkspaceUploadHandler(workspace)
    written: list[int] = []
    write = browse.Incoming.write
    monkeypatch.setattr(
        browse.Incoming,
        "write",
        lambda incoming, chunk: (write(incoming, chunk), written.append(incoming.written)),
    )
    meta = {
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}",
        "CONTENT_LENGTH": str(len(body)),
    }
    _, files = OriginalNameParser(meta, io.BytesIO(body), [handler]).parse()
    assert files.getlist("file") == []
    assert max(written) <= settings.LOOP_UPLOAD_MAX_BYTES  # never a byte past the limit on disk
    assert handler.refusals == [
        "huge.bin was not stored: it is over the 204,800-byte limit per file."
    ]
    assert leftovers(workspace) == []
    handler.discard()
