"""My data and the workspace's paths: a tree nested deeper than Python's recursion limit (a
snippet can make one) neither breaks the export nor the account's deletion; names that read as
a path once converted (NFKC, Windows' best-fit) never reach the zip as they are; and a
workspace whose removal fails leaves the deletion done, and is removed later."""

import io
import logging
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts import my_data
from tests.conftest import PASSWORD
from workspace.paths import MAX_PATH_DEPTH, remove_tree

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]

EXPORT = "/accounts/data/export/"
DELETE = "/accounts/data/delete/"
DEEP = 1_100  # levels: more than the interpreter's recursion limit (1,000)
LISTED = "\n                      "  # how README.txt lists a path left out


def exported(client: Client) -> zipfile.ZipFile:
    response = client.post(EXPORT)
    assert response.status_code == 200
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def files_in(archive: zipfile.ZipFile) -> list[str]:
    return sorted(name for name in archive.namelist() if name.startswith("files/"))


def left_out(archive: zipfile.ZipFile) -> str:
    return archive.read("README.txt").decode().split("Not included:", 1)[1]


def nest(top: Path, levels: int, content: bytes) -> None:
    """`levels` folders named d, one in another, under `top`, and a file at the bottom: made
    by descriptor, as a snippet's `os.mkdir`/`os.chdir` loop would (a path of them all is
    longer than any one call takes)."""
    directory = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=directory)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=directory)
            os.close(directory)
            directory = inner
        handle = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=directory)
        os.write(handle, content)
        os.close(handle)
    finally:
        os.close(directory)


@pytest.fixture
def deep_workspace(alice, workspaces) -> Iterator[Path]:
    """Alice's workspace with a plain file, a file some folders down, and a tree DEEP levels
    deep; whatever is left of it is removed without recursing after the test."""
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    (workspace / "plain.txt").write_text("kept")
    (workspace / "d" / "d" / "d").mkdir(parents=True)
    (workspace / "d" / "d" / "d" / "near.txt").write_text("kept too")
    nest(workspace / "d" / "d" / "d", DEEP - 3, b"too deep to export")
    yield workspace
    remove_tree(workspace)


def test_a_tree_deeper_than_the_recursion_limit_exports_what_a_path_may_hold(
    as_alice, deep_workspace
):
    archive = exported(as_alice)
    assert archive.testzip() is None
    assert files_in(archive) == ["files/d/d/d/near.txt", "files/plain.txt"]
    first_too_deep = "/".join(["d"] * (MAX_PATH_DEPTH + 1))
    assert f"{LISTED}{first_too_deep}\n" in left_out(archive)
    assert "folder listed here is left out with all it holds" in archive.read("README.txt").decode()


def test_an_account_with_a_tree_deeper_than_the_recursion_limit_is_deleted_whole(
    as_alice, alice, deep_workspace, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(DELETE, {"password": PASSWORD})
    assert response.status_code == 302
    assert response.url == "/accounts/data/deleted/"
    assert not User.objects.filter(pk=alice.pk).exists()
    assert not os.path.lexists(deep_workspace)


# Each reads as a path once NFKC or Windows' best-fit conversion has it: '..\..\evil.bat',
# 'C:\Windows\evil.dll', '../up.txt'.
CONVERTED_INTO_PATHS = (
    "\uff0e\uff0e\uff3c\uff0e\uff0e\uff3cevil.bat",
    "\uff23\uff1a\uff3cWindows\uff3cevil.dll",
    "..\uff0fup.txt",
)


def test_names_that_read_as_a_path_once_converted_are_left_out_and_named(
    as_alice, alice, workspaces
):
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    for name in CONVERTED_INTO_PATHS:
        (workspace / name).write_text("x")
    folder = workspace / "\uff0e\uff0e"  # a folder that reads '..': what it holds goes with it
    folder.mkdir()
    (folder / "inside.txt").write_text("x")
    (workspace / "\uff46\uff55\uff4c\uff4c.txt").write_text("wide")  # 'full.txt': no path
    archive = exported(as_alice)
    assert files_in(archive) == ["files/\uff46\uff55\uff4c\uff4c.txt"]
    listed = left_out(archive)
    for name in (*CONVERTED_INTO_PATHS, "\uff0e\uff0e"):
        assert f"{LISTED}{name}\n" in listed
    assert "inside.txt" not in listed


def test_names_that_differ_only_in_normalisation_make_one_entry_and_a_note(
    as_alice, alice, workspaces
):
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    composed, decomposed = "caf\u00e9.txt", "cafe\u0301.txt"
    (workspace / composed).write_text("one")
    (workspace / decomposed).write_text("two")
    archive = exported(as_alice)
    (kept,) = files_in(archive)
    other = decomposed if kept == f"files/{composed}" else composed
    assert kept == f"files/{composed if other == decomposed else decomposed}"
    assert f"{LISTED}{other}" in left_out(archive)


def test_a_workspace_whose_removal_fails_leaves_the_deletion_done_and_goes_at_the_next(
    as_alice, alice, bob, workspaces, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    """The removal fails after the account's deletion committed: the person still sees the
    deletion done, the failure is logged, and the next deletion of any account removes the
    workspace left behind."""
    workspace = workspaces / str(alice.pk)
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hers")
    removal = my_data.remove_tree

    def failing(path: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(my_data, "remove_tree", failing)
    with caplog.at_level(logging.ERROR), django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(DELETE, {"password": PASSWORD})
    assert response.status_code == 302
    assert response.url == "/accounts/data/deleted/"
    assert not User.objects.filter(pk=alice.pk).exists()
    assert (workspace / "notes.txt").exists()
    assert f"Deleted account's workspace {workspace}" in caplog.text
    monkeypatch.setattr(my_data, "remove_tree", removal)
    (workspaces / str(bob.pk)).mkdir()
    as_bob = Client()
    as_bob.force_login(bob)
    with django_capture_on_commit_callbacks(execute=True):
        assert as_bob.post(DELETE, {"password": PASSWORD}).status_code == 302
    assert not os.path.lexists(workspace)
    assert not os.path.lexists(workspaces / str(bob.pk))
