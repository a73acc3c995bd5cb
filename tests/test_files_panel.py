"""The Files panel's pages: the workspace listed newest first, folders, a text file opened (escaped,
in part), downloads (attachment, nosniff, never html or svg), deletion, a symlink never followed,
a file gone between the list and the download, and nothing of another person's."""

import html
import os
import re
from pathlib import Path

import pytest
from django.urls import reverse

from tools.context import context_for
from workspace import browse
from workspace.views import quota_context

pytestmark = pytest.mark.django_db

FILES = "/files/"


@pytest.fixture
def workspace(alice, workspaces, client) -> Path:
    client.force_login(alice)
    return context_for(alice).workspace


def put(workspace: Path, path: str, data: bytes | str, mtime: int | None = None) -> Path:
    target = workspace / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)
    if mtime is not None:
        os.utime(target, (mtime, mtime))
    return target


def test_the_fixed_urls_are_where_the_contract_says():
    assert reverse("files") == "/files/"
    assert reverse("files_upload") == "/files/upload/"
    assert reverse("files_raw", args=["a/b.txt"]) == "/files/raw/a/b.txt"
    assert reverse("files_view", args=["a/b.txt"]) == "/files/view/a/b.txt"
    assert reverse("files_delete") == "/files/delete/"


def test_the_panel_lists_name_size_and_modified_newest_first(client, workspace):
    put(workspace, "old.txt", "x" * 1234, mtime=1_000_000_000)
    put(workspace, "new.txt", "y", mtime=1_700_000_000)
    (workspace / "notes").mkdir()
    os.utime(workspace / "notes", (1_500_000_000, 1_500_000_000))
    page = client.get(FILES)
    assert page.status_code == 200
    body = page.content.decode()
    assert body.index("new.txt") < body.index("notes/") < body.index("old.txt")
    assert "1.2\xa0kB" in body  # 1234 bytes, in decimal units like the quota
    assert "2001-09-09 01:46" in body
    listing = browse.list_folder(workspace)
    assert [(e.name, e.is_folder, e.size) for e in listing.entries] == [
        ("new.txt", False, 1),
        ("notes", True, 0),
        ("old.txt", False, 1234),
    ]


def test_folders_are_navigable_and_show_their_path(client, workspace):
    put(workspace, "notes/2026/plan.md", "# plan")
    page = client.get(FILES, {"dir": "notes"})
    assert page.status_code == 200
    assert 'href="/files/?dir=notes/2026"' in page.content.decode()
    inner = client.get(FILES, {"dir": "notes/2026"}).content.decode()
    assert 'href="/files/view/notes/2026/plan.md"' in inner
    assert '<a href="/files/?dir=notes">notes</a>' in inner  # the way back up


def test_files_named_like_temp_files_are_listed_as_the_quota_counts_them(client, workspace):
    put(workspace, ".data.csv.0123456789abcdef.tmp", "a snippet's file")
    body = client.get(FILES).content.decode()
    assert ".data.csv.0123456789abcdef.tmp" in body
    assert "Your workspace is empty" not in body


@pytest.mark.parametrize(
    ("folder", "status"),
    [("../", 400), ("/etc", 400), ("a\x00b", 400), ("a\x1bb", 400), ("nothing-here", 404)],
)
def test_a_bad_or_missing_folder_is_refused_with_a_reason(client, workspace, folder, status):
    page = client.get(FILES, {"dir": folder})
    assert page.status_code == status
    assert 'role="alert"' in page.content.decode()


def test_the_panel_is_usable_on_a_phone_and_has_no_inline_script(client, workspace):
    body = client.get(FILES).content.decode()
    assert 'name="viewport"' in body
    assert "files.css" in body
    assert "files.js" in body
    assert "onclick" not in body
    assert "onsubmit" not in body
    assert "<script>" not in body
    assert 'id="drop-zone"' in body
    assert 'type="file" name="file" multiple' in body


def test_a_text_file_opens_inline_escaped_never_as_html(client, workspace):
    put(workspace, "page.html", "<script>alert(1)</script><b>bold</b>")
    page = client.get("/files/view/page.html")
    body = page.content.decode()
    assert page.status_code == 200
    # Shown as its source, highlighted: its text is there, none of its tags.
    source = html.unescape(re.sub(r"<[^>]*>", "", body))
    assert "<script>alert(1)</script><b>bold</b>" in source
    assert "<script>alert(1)" not in body
    assert "<b>bold" not in body


def test_a_large_text_file_is_shown_in_part_with_a_note(client, workspace):
    put(workspace, "big.txt", "é" * browse.VIEW_MAX_BYTES)  # 2 bytes each: cut mid-file
    page = client.get("/files/view/big.txt")
    body = page.content.decode()
    assert "only its first" in body
    part = browse.open_text(workspace, "big.txt")
    assert part.cut
    assert part.shown_bytes == browse.VIEW_MAX_BYTES
    assert part.text == "é" * (browse.VIEW_MAX_BYTES // 2)
    small = browse.open_text(workspace, "big.txt", limit=5)  # a cut inside a character
    assert small.text == "éé"
    assert small.cut


def test_a_binary_file_is_not_shown_but_can_be_downloaded(client, workspace):
    put(workspace, "blob.bin", b"\xff\xfe\x00binary")
    page = client.get("/files/view/blob.bin")
    assert page.status_code == 400
    assert "download it" in page.content.decode()
    assert client.get("/files/raw/blob.bin").status_code == 200


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("evil.html", "application/octet-stream"),
        ("evil.svg", "application/octet-stream"),
        ("evil.htm", "application/octet-stream"),
        ("data.csv", "text/plain; charset=utf-8"),
        ("notes.txt", "text/plain; charset=utf-8"),
        ("photo.png", "application/octet-stream"),
    ],
)
def test_a_download_is_an_attachment_never_rendered(client, workspace, name, content_type):
    put(workspace, name, "<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")
    response = client.get(f"/files/raw/{name}")
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    assert response["Content-Disposition"] == f'attachment; filename="{name}"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert b"".join(response.streaming_content).startswith(b"<svg")


def test_a_download_of_a_file_with_an_unusual_name_keeps_it(client, workspace):
    put(workspace, "a b/ünï #1?.txt", "hi")
    listing = client.get(FILES, {"dir": "a b"}).content.decode()
    url = reverse("files_raw", args=["a b/ünï #1?.txt"])
    assert url == "/files/raw/a%20b/%C3%BCn%C3%AF%20%231%3F.txt"
    assert f'href="{url}"' in listing
    response = client.get(url)
    assert response.status_code == 200
    assert "filename*=utf-8''%C3%BCn%C3%AF%20%231%3F.txt" in response["Content-Disposition"]


def test_a_file_gone_between_the_list_and_the_download_gets_a_clear_404(client, workspace):
    put(workspace, "brief.txt", "soon gone")
    assert "brief.txt" in client.get(FILES).content.decode()
    (workspace / "brief.txt").unlink()
    for url in ("/files/raw/brief.txt", "/files/view/brief.txt"):
        response = client.get(url)
        assert response.status_code == 404
        assert "may have been deleted or renamed" in response.content.decode()


def test_a_symlink_made_by_run_code_is_listed_but_never_followed(client, workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.symlink(secret, workspace / "link.txt")  # what a snippet could leave behind
    os.symlink("/etc", workspace / "etc")
    (workspace / "real").mkdir()
    os.symlink(secret, workspace / "real" / "inner.txt")
    listing = client.get(FILES).content.decode()
    assert "link.txt" in listing
    assert "not followed" in listing
    assert 'href="/files/raw/link.txt"' not in listing
    for url in (
        "/files/raw/link.txt",
        "/files/view/link.txt",
        "/files/raw/etc/passwd",
        "/files/raw/real/inner.txt",
    ):
        response = client.get(url)
        assert response.status_code == 400, url
        assert "symlink" in response.content.decode()
        assert b"host secret" not in response.content
    assert client.get(FILES, {"dir": "etc"}).status_code == 400


def test_delete_removes_a_file_and_says_so(client, workspace):
    put(workspace, "notes/old.txt", "bye")
    response = client.post("/files/delete/", {"path": "notes/old.txt"}, follow=True)
    assert not (workspace / "notes/old.txt").exists()
    assert "Deleted notes/old.txt." in response.content.decode()
    assert response.redirect_chain[-1][0] == "/files/?dir=notes"


def test_delete_removes_a_symlink_itself_never_its_target(client, workspace, tmp_path):
    secret = tmp_path / "keep.txt"
    secret.write_text("stays")
    os.symlink(secret, workspace / "link")
    client.post("/files/delete/", {"path": "link"})
    assert not os.path.lexists(workspace / "link")
    assert secret.read_text() == "stays"


def test_delete_asks_before_a_folder_with_files_and_removes_an_empty_one(client, workspace):
    put(workspace, "full/a.txt", "a")
    (workspace / "empty").mkdir()
    asked = client.post("/files/delete/", {"path": "full"}, headers={"HX-Request": "true"})
    assert asked.status_code == 409
    body = asked.content.decode()
    assert "full is a folder holding 1 entry. Delete it with everything in it?" in body
    assert '<input type="hidden" name="contents" value="1">' in body
    assert (workspace / "full/a.txt").exists()
    client.post("/files/delete/", {"path": "empty"})
    assert not (workspace / "empty").exists()


def test_a_folder_is_deleted_whole_only_with_the_number_of_entries_it_holds(client, workspace):
    put(workspace, "full/a.txt", "a")
    put(workspace, "full/sub/b.txt", "b")
    json = {"Accept": "application/json"}
    changed = client.post("/files/delete/", {"path": "full", "contents": "2"}, headers=json)
    assert changed.status_code == 409
    assert changed.json()["contents"] == 3
    assert "(not 2: it changed since)" in changed.json()["refused"][0]
    assert (workspace / "full/sub/b.txt").exists()
    done = client.post("/files/delete/", {"path": "full", "contents": "3"}, headers=json)
    assert done.json() == {"done": ["Deleted the folder full and the 3 entries it held."],
                           "refused": []}  # fmt: skip
    assert os.listdir(workspace) == []


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "", "a\x00b", "missing.txt"])
def test_delete_refuses_what_is_not_a_file_of_the_workspace(client, workspace, path):
    response = client.post("/files/delete/", {"path": path}, headers={"Accept": "application/json"})
    assert response.status_code in (400, 404)
    assert response.json()["refused"]


def test_delete_asks_for_confirmation_without_an_inline_handler(client, workspace):
    put(workspace, "a.txt", "a")
    body = client.get(FILES).content.decode()
    assert 'data-confirm="Delete a.txt?"' in body
    assert "confirm(" not in body


def test_htmx_gets_the_panel_fragment_alone(client, workspace):
    put(workspace, "a.txt", "a")
    body = client.get(FILES, headers={"HX-Request": "true"}).content.decode()
    assert body.lstrip().startswith('<section class="files-panel" id="files-panel"')
    assert "<html" not in body


def test_quota_context_says_how_much_is_used(alice, workspace, settings):
    settings.LOOP_WORKSPACE_MAX_BYTES = 1000
    put(workspace, "a.txt", "x" * 250)
    quota = quota_context(alice)
    assert (quota["used_bytes"], quota["max_bytes"], quota["percent"]) == (250, 1000, 25)


def test_the_panel_shows_the_quota(client, workspace, settings):
    settings.LOOP_WORKSPACE_MAX_BYTES = 1000
    put(workspace, "a.txt", "x" * 250)
    body = client.get(FILES).content.decode()
    assert '<meter min="0" max="1000" value="250"' in body


def test_another_persons_files_do_not_exist_for_you(client, workspace, bob):
    put(workspace, "diary.txt", "alice's")
    (workspace / "private").mkdir()
    client.force_login(bob)
    assert "diary.txt" not in client.get(FILES).content.decode()
    for url in ("/files/raw/diary.txt", "/files/view/diary.txt"):
        assert client.get(url).status_code == 404
    assert client.get(FILES, {"dir": "private"}).status_code == 404
    assert client.post("/files/delete/", {"path": "diary.txt"}).status_code == 302
    assert (workspace / "diary.txt").read_text() == "alice's"
    answer = client.post(
        "/files/delete/", {"path": "diary.txt"}, headers={"Accept": "application/json"}
    )
    assert answer.status_code == 404


def test_every_page_asks_a_stranger_to_log_in(client):
    for url in (FILES, "/files/raw/a.txt", "/files/view/a.txt"):
        response = client.get(url)
        assert response.status_code == 302
        assert "/accounts/login/" in response["Location"]


def test_a_name_made_before_the_path_rules_is_shown_without_a_link_and_can_be_deleted(
    client, workspace
):
    """A look-alike of '..\\..\\evil.bat' that a snippet saved before the rules: no view or
    download (the panel refuses such a path), but nothing stays that the person cannot remove."""
    legacy = "\uff0e\uff0e\uff3c\uff0e\uff0e\uff3cevil.bat"
    put(workspace, legacy, "from before")
    body = client.get(FILES).content.decode()
    assert legacy in body
    assert "/files/view/" not in body
    assert "/files/raw/" not in body
    assert f'<input type="hidden" name="path" value="{legacy}">' in body
    assert client.get(f"/files/view/{legacy}").status_code == 400
    done = client.post("/files/delete/", {"path": legacy}, headers={"Accept": "application/json"})
    assert done.json() == {"done": [f"Deleted {legacy}."], "refused": []}
    assert os.listdir(workspace) == []


def test_an_entrys_kind_is_a_code_and_its_words_are_kept_apart(client, workspace):
    """Entry.kind was "file" for one file and "a file" for another (one the panel cannot name),
    "symlink" beside "a FIFO": the page compared codes to prose, and showed no size for a file
    whose kind read "a file"."""
    put(workspace, "plain.txt", "x")
    (workspace / "folder").mkdir()
    os.symlink("plain.txt", workspace / "link")
    os.mkfifo(workspace / "pipe")
    (workspace / "odd\udcff.txt").write_bytes(b"12345")  # a name that is not UTF-8 (b"\xff")
    kinds = {entry.name: entry.kind for entry in browse.list_folder(workspace).entries}
    assert kinds == {
        "plain.txt": browse.Kind.FILE,
        "folder": browse.Kind.FOLDER,
        "link": browse.Kind.SYMLINK,
        "pipe": browse.Kind.FIFO,
        "odd\\xff.txt": browse.Kind.FILE,
    }
    assert [kind.described for kind in browse.Kind] == [
        *("a file", "a folder", "a symlink", "a FIFO", "a socket", "a device"),
        "not a regular file",
    ]
    body = client.get(FILES).content.decode()
    assert "(symlink, not followed)" in body
    assert "(a FIFO)" in body
    assert "(a file, with a name the Files panel cannot open)" in body
    assert 'class="entry kind-fifo"' in body
    assert "5\xa0bytes" in body  # the size of the file the panel cannot name
