"""The workspace file tools: round trips, and refusal of every path that could lead outside."""

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from core.results import ToolResult, ToolStatus
from tools import files
from tools.base import ToolContext, ToolRegistry
from tools.files import LIST_FILES, MAX_READ_BYTES, MAX_WRITE_BYTES, READ_FILE, WRITE_FILE

pytestmark = pytest.mark.fast

Call = Callable[..., ToolResult]

OUTSIDE_TEXT = "outside secret\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A sibling of the workspace whose name shares its prefix, holding a file worth stealing."""
    path = tmp_path / "ws-evil"
    path.mkdir()
    (path / "secret.txt").write_text(OUTSIDE_TEXT)
    return path


@pytest.fixture
def call(workspace: Path) -> Call:
    """Dispatch a tool call as the model would, and check no result reveals the host path."""
    registry = ToolRegistry([READ_FILE, WRITE_FILE, LIST_FILES])
    context = ToolContext(user_id=1, username="alice", workspace=workspace)

    def dispatch(name: str, **arguments: str) -> ToolResult:
        result = registry.dispatch(name, json.dumps(arguments), context)
        assert str(workspace.parent) not in result.text
        return result

    return dispatch


def snapshot(tmp_path: Path) -> dict[str, bytes | None]:
    """Everything under tmp_path outside the workspace, with file contents."""
    return {
        str(path): (path.read_bytes() if path.is_file() and not path.is_symlink() else None)
        for path in sorted(tmp_path.rglob("*"))
        if (tmp_path / "ws") not in (path, *path.parents)
    }


def assert_denied(result: ToolResult) -> None:
    assert result.status is ToolStatus.DENIED, result.text


def assert_error(result: ToolResult, *fragments: str) -> None:
    assert result.status is ToolStatus.ERROR, result.text
    for fragment in fragments:
        assert fragment in result.text


# Happy paths -------------------------------------------------------------------------------------


def test_write_then_read_round_trips_the_content(call: Call) -> None:
    written = call("write_file", path="notes.txt", content="hello\nworld\n")
    assert written.status is ToolStatus.OK
    assert written.text == "Wrote 12 bytes to notes.txt."
    read = call("read_file", path="notes.txt")
    assert read.status is ToolStatus.OK
    assert read.text == "hello\nworld\n"


def test_write_creates_missing_parent_directories(call: Call, workspace: Path) -> None:
    result = call("write_file", path="a/b/c/deep.txt", content="x")
    assert result.status is ToolStatus.OK
    assert result.text == "Wrote 1 bytes to a/b/c/deep.txt."
    assert (workspace / "a" / "b" / "c" / "deep.txt").read_text() == "x"
    assert oct((workspace / "a").stat().st_mode & 0o777) == oct(0o755 & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_overwrites_an_existing_file(call: Call) -> None:
    call("write_file", path="n.txt", content="a much longer first version")
    assert call("write_file", path="n.txt", content="short").status is ToolStatus.OK
    assert call("read_file", path="n.txt").text == "short"


def test_unicode_content_and_names_round_trip_and_size_counts_utf8_bytes(call: Call) -> None:
    text = "naïve café ☕ 日本語 🎉"
    written = call("write_file", path="données/été.txt", content=text)
    assert written.text == f"Wrote {len(text.encode())} bytes to données/été.txt."
    assert call("read_file", path="./données//été.txt").text == text


def test_read_of_an_empty_file_says_it_is_empty(call: Call) -> None:
    call("write_file", path="empty.txt", content="")
    result = call("read_file", path="empty.txt")
    assert result.status is ToolStatus.OK
    assert "empty" in result.text


def test_list_shows_sorted_entries_with_directories_and_sizes(call: Call) -> None:
    call("write_file", path="b.txt", content="12345")
    call("write_file", path="a/inner.txt", content="x")
    call("write_file", path="c.txt", content="")
    result = call("list_files")
    assert result.status is ToolStatus.OK
    assert result.text.splitlines() == [
        "Your workspace contains 3 entries:",
        "a/",
        "b.txt (5 bytes)",
        "c.txt (0 bytes)",
    ]
    assert call("list_files", path="a").text.splitlines() == [
        "a/ contains 1 entry:",
        "inner.txt (1 bytes)",
    ]


def test_list_of_an_empty_directory_says_it_is_empty(call: Call, workspace: Path) -> None:
    assert call("list_files").text == "Your workspace is empty."
    (workspace / "sub").mkdir()
    assert call("list_files", path="sub").text == "sub/ is empty."


def test_list_treats_an_empty_path_as_the_workspace_root(call: Call) -> None:
    call("write_file", path="x.txt", content="x")
    assert call("list_files", path="").text.splitlines()[1:] == ["x.txt (1 bytes)"]


def test_list_shows_every_file_even_one_named_like_a_temp_file(call: Call, workspace: Path) -> None:
    # A snippet's files named like write_file's temp files count in the quota: they are shown.
    (workspace / ".notes.txt.0123456789abcdef.tmp").write_text("half")
    (workspace / ".hidden").write_text("shown")
    assert call("list_files").text.splitlines()[1:] == [
        ".hidden (5 bytes)",
        ".notes.txt.0123456789abcdef.tmp (4 bytes)",
    ]


def test_list_caps_the_number_of_entries_with_a_note(workspace: Path) -> None:
    for index in range(files.MAX_LIST_ENTRIES + 5):
        (workspace / f"f{index:05}").touch()
    # A registry that does not truncate results, so the whole capped listing is visible.
    registry = ToolRegistry([LIST_FILES], max_result_chars=1_000_000)
    context = ToolContext(user_id=1, username="alice", workspace=workspace)
    lines = registry.dispatch("list_files", "{}", context).text.splitlines()
    assert len(lines) == files.MAX_LIST_ENTRIES + 2
    assert lines[1] == "f00000 (0 bytes)"
    assert "first 1,000 of 1,005 entries" in lines[-1]


def test_list_quotes_names_that_could_forge_listing_lines(call: Call, workspace: Path) -> None:
    (workspace / "evil\nsecret.txt (9 bytes)").touch()
    lines = call("list_files").text.splitlines()
    assert lines[1:] == ["'evil\\nsecret.txt (9 bytes)' (0 bytes)"]


# Hostile paths -----------------------------------------------------------------------------------

HOSTILE_PATHS = [
    "/etc/passwd",
    "//etc/passwd",
    "../x",
    "..",
    "a/..",
    "a/../../x",
    "../ws-evil/secret.txt",
    "x\x00y",
    "a\\b",
    "C:x",
    "c:\\x",
    "a\nb",
    "a\x7fb",
    "a\tb",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_path_is_denied_by_every_tool_and_touches_nothing_outside(
    call: Call, tmp_path: Path, outside: Path, path: str
) -> None:
    before = snapshot(tmp_path)
    for result in (
        call("read_file", path=path),
        call("write_file", path=path, content="pwned"),
        call("list_files", path=path),
    ):
        assert_denied(result)
        assert "root:" not in result.text
    assert snapshot(tmp_path) == before


def test_empty_path_is_denied_for_read_and_write(call: Call) -> None:
    assert_denied(call("read_file", path=""))
    assert_denied(call("write_file", path="", content="x"))


def test_dotdot_refusal_explains_itself(call: Call) -> None:
    assert "'..'" in call("read_file", path="a/../b").text


def test_names_that_merely_contain_dots_are_allowed(call: Call) -> None:
    assert call("write_file", path="v1..v2/..notes...txt", content="ok").status is ToolStatus.OK
    assert call("read_file", path="v1..v2/..notes...txt").text == "ok"


def test_workspace_named_path_reaches_inside_not_the_prefix_sibling(
    call: Call, workspace: Path, outside: Path
) -> None:
    assert call("write_file", path="ws-evil/secret.txt", content="mine").status is ToolStatus.OK
    assert (workspace / "ws-evil" / "secret.txt").read_text() == "mine"
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


# Symlinks ----------------------------------------------------------------------------------------


def link_targets(tmp_path: Path, outside: Path) -> dict[str, Path]:
    return {"parent": tmp_path, "sibling": outside, "file": outside / "secret.txt"}


def test_symlinked_final_file_is_refused_for_read_and_write(
    call: Call, workspace: Path, outside: Path
) -> None:
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    read = call("read_file", path="link.txt")
    assert_denied(read)
    assert "symlink" in read.text
    assert OUTSIDE_TEXT.strip() not in read.text
    written = call("write_file", path="link.txt", content="pwned")
    assert_denied(written)
    assert "symlink" in written.text
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (workspace / "link.txt").is_symlink()


def test_a_hard_link_to_a_file_outside_the_workspace_is_never_read(
    call: Call, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "linked.txt")
    read = call("read_file", path="linked.txt")
    assert_denied(read)
    assert "hard links" in read.text
    assert OUTSIDE_TEXT.strip() not in read.text


def test_a_long_name_in_a_script_of_many_bytes_is_written(call: Call, workspace: Path) -> None:
    """The temporary file beside it is cut by bytes, the disk's limit, not by characters."""
    name = "é" * 120 + ".txt"  # 244 bytes: a name the disk takes
    assert call("write_file", path=name, content="hi").status is ToolStatus.OK
    assert (workspace / name).read_text() == "hi"


@pytest.mark.parametrize("target", ["parent", "sibling"])
def test_symlinked_directory_to_outside_is_refused_by_every_tool(
    call: Call, tmp_path: Path, workspace: Path, outside: Path, target: str
) -> None:
    (workspace / "door").symlink_to(link_targets(tmp_path, outside)[target])
    inner = "door/secret.txt" if target == "sibling" else "door/ws-evil/secret.txt"
    before = snapshot(tmp_path)
    assert_denied(call("read_file", path=inner))
    assert_denied(call("write_file", path=inner, content="pwned"))
    assert_denied(call("write_file", path="door/planted.txt", content="pwned"))
    assert_denied(call("list_files", path="door"))
    assert_denied(call("list_files", path=inner.rsplit("/", 1)[0]))
    assert snapshot(tmp_path) == before


def test_symlink_deep_in_the_path_is_refused(call: Call, workspace: Path, outside: Path) -> None:
    (workspace / "a" / "b").mkdir(parents=True)
    (workspace / "a" / "b" / "door").symlink_to(outside)
    result = call("write_file", path="a/b/door/new/planted.txt", content="pwned")
    assert_denied(result)
    assert "a/b/door is a symlink" in result.text
    assert not (outside / "new").exists()


def test_symlink_pointing_inside_the_workspace_is_refused_too(call: Call, workspace: Path) -> None:
    call("write_file", path="real/notes.txt", content="x")
    (workspace / "alias").symlink_to(workspace / "real")
    (workspace / "alias.txt").symlink_to("real/notes.txt")
    assert_denied(call("read_file", path="alias/notes.txt"))
    assert_denied(call("read_file", path="alias.txt"))
    assert "not even ones that point inside" in call("list_files", path="alias").text


def test_dangling_symlink_is_refused_and_not_created_through(
    call: Call, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "dangling.txt").symlink_to(tmp_path / "created-outside.txt")
    assert_denied(call("write_file", path="dangling.txt", content="pwned"))
    assert not (tmp_path / "created-outside.txt").exists()


def test_list_shows_symlinks_without_following_them(
    call: Call, workspace: Path, outside: Path
) -> None:
    (workspace / "door").symlink_to(outside)
    result = call("list_files")
    assert result.status is ToolStatus.OK
    assert result.text.splitlines()[1:] == ["door -> (symlink, not followed)"]


def test_directory_swapped_for_a_symlink_between_writes_is_refused(
    call: Call, workspace: Path, outside: Path
) -> None:
    assert call("write_file", path="d/secret.txt", content="first").status is ToolStatus.OK
    (workspace / "d").rename(workspace / "d-old")
    (workspace / "d").symlink_to(outside)
    assert_denied(call("write_file", path="d/secret.txt", content="pwned"))
    assert_denied(call("read_file", path="d/secret.txt"))
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (workspace / "d-old" / "secret.txt").read_text() == "first"


# Special files, encodings, sizes -----------------------------------------------------------------


def test_reading_a_fifo_does_not_hang_and_is_denied(call: Call, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    result = call("read_file", path="pipe")
    assert_denied(result)
    assert "FIFO" in result.text
    assert_denied(call("write_file", path="pipe", content="x"))
    assert call("list_files").text.splitlines()[1:] == ["pipe (a FIFO)"]


def test_undecodable_bytes_are_reported_with_their_offset(call: Call, workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"ok\xff\xfe")
    assert_error(call("read_file", path="blob.bin"), "not UTF-8", "offset 2")


def test_lone_surrogate_content_is_an_error_not_a_crash(call: Call, workspace: Path) -> None:
    assert_error(call("write_file", path="s.txt", content="a\ud800b"), "UTF-8")
    assert not (workspace / "s.txt").exists()


def test_read_accepts_a_file_at_the_cap_and_refuses_one_byte_over(
    call: Call, workspace: Path
) -> None:
    (workspace / "max.txt").write_bytes(b"a" * MAX_READ_BYTES)
    assert call("read_file", path="max.txt").status is ToolStatus.OK
    (workspace / "big.txt").write_bytes(b"a" * (MAX_READ_BYTES + 1))
    assert_error(call("read_file", path="big.txt"), "1,000,001", f"{MAX_READ_BYTES:,}")


def test_write_refuses_content_over_the_cap_in_utf8_bytes(call: Call, workspace: Path) -> None:
    assert_error(
        call("write_file", path="big.txt", content="a" * (MAX_WRITE_BYTES + 1)), "1,000,001"
    )
    two_byte_chars = "é" * (MAX_WRITE_BYTES // 2 + 1)
    assert_error(call("write_file", path="big.txt", content=two_byte_chars), f"{MAX_WRITE_BYTES:,}")
    assert not (workspace / "big.txt").exists()


def test_reading_a_directory_suggests_list_files(call: Call, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    assert_error(call("read_file", path="sub"), "is a directory", "list_files")
    assert_error(call("read_file", path="."), "list_files")


def test_writing_over_a_directory_is_refused(call: Call, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    assert_error(call("write_file", path="sub", content="x"), "is a directory")
    assert_error(call("write_file", path="sub/", content="x"), "file name")
    assert (workspace / "sub").is_dir()


def test_writing_below_a_file_is_an_error(call: Call) -> None:
    call("write_file", path="a.txt", content="x")
    assert_error(call("write_file", path="a.txt/b.txt", content="y"), "a.txt is a file")
    assert_error(call("list_files", path="a.txt"), "read_file")


def test_missing_file_is_an_error_that_points_to_list_files(call: Call) -> None:
    assert_error(call("read_file", path="notes.txt"), "notes.txt does not exist", "list_files")
    assert_error(call("read_file", path="nowhere/notes.txt"), "nowhere does not exist")
    assert_error(call("list_files", path="nowhere"), "nowhere does not exist")


def test_extra_arguments_are_rejected(call: Call) -> None:
    assert_error(call("read_file", path="a.txt", mode="rb"), "mode")


# Atomicity and ownership -------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["fsync", "rename"])
def test_failed_write_keeps_the_old_content_and_leaves_no_temp_file(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    call("write_file", path="keep.txt", content="old content")

    def fail(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files.os, failing, fail)
    assert_error(call("write_file", path="keep.txt", content="new"), "Could not write keep.txt")
    monkeypatch.undo()
    assert (workspace / "keep.txt").read_text() == "old content"
    assert sorted(os.listdir(workspace)) == ["keep.txt"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")
def test_new_files_and_directories_belong_to_the_workspace_owner(
    call: Call, workspace: Path
) -> None:
    os.chown(workspace, 65534, 65534)
    call("write_file", path="made/by/tool.txt", content="x")
    for path in (workspace / "made", workspace / "made" / "by", workspace / "made/by/tool.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534)


def swap_before(monkeypatch: pytest.MonkeyPatch, workspace: Path, outside: Path, flag: int) -> None:
    """Make directory d a symlink to outside just before the tool opens a file with flag."""
    real_open = os.open

    def open_after_swap(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if flags & flag and not (workspace / "d").is_symlink():
            (workspace / "d").rename(workspace / "d-old")
            (workspace / "d").symlink_to(outside)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", open_after_swap)


def test_directory_swapped_for_a_symlink_mid_write_is_not_written_through(
    call: Call, workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    call("write_file", path="d/secret.txt", content="first")
    swap_before(monkeypatch, workspace, outside, os.O_CREAT)
    assert call("write_file", path="d/secret.txt", content="second").status is ToolStatus.OK
    monkeypatch.undo()
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (workspace / "d-old" / "secret.txt").read_text() == "second"


def test_directory_swapped_for_a_symlink_mid_read_is_not_read_through(
    call: Call, workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    call("write_file", path="d/secret.txt", content="first")
    swap_before(monkeypatch, workspace, outside, os.O_NONBLOCK)
    result = call("read_file", path="d/secret.txt")
    monkeypatch.undo()
    assert result.text == "first"
