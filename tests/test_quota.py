"""The workspace quota: snippets and write_file trying to fill a workspace stop at its quota."""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.results import ToolResult, ToolStatus
from sandbox.chain import quota_prefix
from sandbox.fence import Channel
from sandbox.policies import Limits
from tools.base import ToolContext, ToolRegistry
from tools.code import RUN_CODE
from tools.files import LIST_FILES, READ_FILE, WRITE_FILE
from workspace.directory import ensure_workspace
from workspace.quota import Quota, usage

from .sandboxes import SANDBOX

MB = 1_000_000
FILE_CAP = Limits().max_file_bytes
REGISTRY = ToolRegistry([RUN_CODE, READ_FILE, WRITE_FILE, LIST_FILES])


@pytest.fixture
def context(workspaces: Path) -> ToolContext:
    workspace = ensure_workspace(workspaces / "7", 7)
    return ToolContext(user_id=7, username="alice", workspace=workspace, sandbox=SANDBOX)


@pytest.fixture
def quota(settings) -> Quota:
    settings.LOOP_WORKSPACE_MAX_BYTES = 40 * MB
    settings.LOOP_WORKSPACE_MAX_FILES = 2_000
    return Quota.from_settings()


def call(context: ToolContext, tool: str, **arguments: object) -> ToolResult:
    return REGISTRY.dispatch(tool, json.dumps(arguments), context)


def run(context: ToolContext, code: str, timeout: int = 30) -> ToolResult:
    return call(context, "run_code", code=code, timeout=timeout)


def names_quota_and_usage(text: str, quota: Quota, workspace: Path) -> bool:
    used = usage(workspace)
    return f"{quota.max_bytes:,} bytes" in text and f"{used.bytes:,} bytes in" in text


def keepsake(context: ToolContext) -> Path:
    """A file of the user's that no attempt to fill the workspace may touch."""
    assert call(context, "write_file", path="notes/keep.txt", content="keep me\n").ok
    return context.workspace / "notes" / "keep.txt"


FILL_MANY_FILES = """
import os
written = 0
try:
    for number in range(300):  # 300 files of 1 MB: 300 MB
        with open(f"fill-{number:03}.bin", "wb") as file:
            file.write(os.urandom(1_000_000))
        written += 1
finally:
    print("files written:", written)
"""

FILL_ONE_FILE = """
import os
chunk = os.urandom(1_000_000)
with open("fill.bin", "wb") as file:
    for _ in range(300):  # 300 MB in one file
        file.write(chunk)
"""


@pytest.mark.parametrize(
    ("code", "max_bytes"),
    [(FILL_MANY_FILES, 40 * MB), (FILL_ONE_FILE, 10 * MB)],
    ids=["many files", "one file"],
)
def test_a_snippet_writing_300_mb_stops_at_the_quota(
    context: ToolContext, settings, code: str, max_bytes: int
) -> None:
    # One file: a quota under the 16 MiB file cap, so the quota stops it rather than the rlimit.
    settings.LOOP_WORKSPACE_MAX_BYTES = max_bytes
    settings.LOOP_WORKSPACE_MAX_FILES = 2_000
    quota = Quota.from_settings()
    kept = keepsake(context)

    result = run(context, code)

    used = usage(context.workspace)
    assert used.bytes <= quota.max_bytes + FILE_CAP
    assert used.bytes > quota.max_bytes // 2  # writes within the quota were saved
    assert result.status is ToolStatus.ERROR
    assert "No space left on device" in result.text
    assert "Workspace quota reached" in result.text
    assert names_quota_and_usage(result.text, quota, context.workspace)
    assert kept.read_text() == "keep me\n"


def test_the_file_count_cap_holds_against_100000_files(context: ToolContext, quota: Quota) -> None:
    kept = keepsake(context)
    code = """
made = 0
try:
    for number in range(100_000):
        open(f"f{number}", "w").close()
        made += 1
finally:
    print("made", made)
"""
    result = run(context, code)

    assert usage(context.workspace).files <= quota.max_files
    assert "Workspace quota reached" in result.text
    assert names_quota_and_usage(result.text, quota, context.workspace)
    assert kept.read_text() == "keep me\n"


def test_files_past_the_quota_are_not_saved_and_keep_their_earlier_version(
    context: ToolContext, quota: Quota
) -> None:
    """The upper layer holds them all; the saver stops once the workspace is at the quota."""
    setup = """
for name in ("base-1.bin", "base-2.bin"):
    open(name, "wb").write(b"o" * 15_000_000)
open("z.txt", "w").write("before")
"""
    assert run(context, setup).ok
    code = """
open('a.bin', 'wb').write(b'a' * 15_000_000)
open('b.bin', 'wb').write(b'b' * 15_000_000)
open('z.txt', 'w').write('after' * 1_000_000)
"""
    result = run(context, code)

    assert usage(context.workspace).bytes <= quota.max_bytes + FILE_CAP
    assert "Not saved, over the quota: b.bin, z.txt." in result.text
    assert names_quota_and_usage(result.text, quota, context.workspace)
    assert (context.workspace / "a.bin").stat().st_size == 15_000_000
    assert not (context.workspace / "b.bin").exists()
    assert (context.workspace / "z.txt").read_text() == "before"


def test_partial_writes_of_a_snippet_killed_at_its_timeout_are_kept(
    context: ToolContext, quota: Quota
) -> None:
    code = """
with open("progress.txt", "w") as file:
    file.write("halfway\\n")
while True:
    pass
"""
    result = run(context, code, timeout=1)

    assert result.status is ToolStatus.TIMEOUT
    assert (context.workspace / "progress.txt").read_text() == "halfway\n"


def test_a_snippet_killed_while_filling_stays_within_the_quota(
    context: ToolContext, quota: Quota
) -> None:
    code = """
import os
number = 0
while True:
    try:
        with open(f"fill-{number}.bin", "wb") as file:
            file.write(os.urandom(1_000_000))
    except OSError:
        pass
    number += 1
"""
    result = run(context, code, timeout=2)

    assert result.status is ToolStatus.TIMEOUT
    assert quota.max_bytes // 2 < usage(context.workspace).bytes <= quota.max_bytes + FILE_CAP


def test_deleting_and_rewriting_within_the_quota_works_near_it(
    context: ToolContext, quota: Quota
) -> None:
    """Normal use: replacing 30 of a 40 MB quota's bytes, renaming, removing a tree."""
    setup = """
import os
os.makedirs("tree/deep")
open("tree/deep/leaf.txt", "w").write("leaf")
for name in ("data-1.bin", "data-2.bin"):
    open(name, "wb").write(b"a" * 15_000_000)
open("rename-me.txt", "w").write("moved")
"""
    assert run(context, setup).ok
    rewrite = """
import os, shutil
for name in ("data-1.bin", "data-2.bin"):
    os.remove(name)
    open(name, "wb").write(b"b" * 15_000_000)
os.rename("rename-me.txt", "moved.txt")
shutil.rmtree("tree")
os.mkdir("tree")
open("tree/fresh.txt", "w").write("fresh")
print(sorted(os.listdir(".")))
"""
    result = run(context, rewrite)

    assert result.ok, result.text
    workspace = context.workspace
    for name in ("data-1.bin", "data-2.bin"):
        assert (workspace / name).read_bytes() == b"b" * 15_000_000
    assert (workspace / "moved.txt").read_text() == "moved"
    assert not (workspace / "rename-me.txt").exists()
    assert sorted(path.name for path in (workspace / "tree").iterdir()) == ["fresh.txt"]
    assert "quota" not in result.text
    assert call(context, "read_file", path="moved.txt").text == "moved"
    assert "tree/" in call(context, "list_files").text


def test_write_file_past_the_quota_fails_and_keeps_existing_files(
    context: ToolContext, settings
) -> None:
    settings.LOOP_WORKSPACE_MAX_BYTES = 2_500_000  # two files of write_file's 1 MB limit
    settings.LOOP_WORKSPACE_MAX_FILES = 5
    quota = Quota.from_settings()
    content = "x" * 1_000_000
    assert call(context, "write_file", path="one.txt", content=content).ok
    assert call(context, "write_file", path="two.txt", content=content).ok

    refused = call(context, "write_file", path="three.txt", content=content)

    assert refused.status is ToolStatus.ERROR
    assert "quota" in refused.text
    assert names_quota_and_usage(refused.text, quota, context.workspace)
    assert not (context.workspace / "three.txt").exists()
    assert (context.workspace / "one.txt").read_text() == content
    assert (context.workspace / "two.txt").read_text() == content
    # Replacing a file counts only the difference, so a rewrite near the quota still works.
    assert call(context, "write_file", path="two.txt", content="y" * 1_000_000).ok


def test_write_file_counts_new_directories_against_the_file_cap(
    context: ToolContext, settings
) -> None:
    settings.LOOP_WORKSPACE_MAX_FILES = 3
    refused = call(context, "write_file", path="a/b/c/d.txt", content="deep")

    assert refused.status is ToolStatus.ERROR
    assert "3 files and directories" in refused.text
    assert list(context.workspace.iterdir()) == []
    assert call(context, "write_file", path="a/b.txt", content="fits").ok


def test_the_saver_replaces_a_planted_symlink_and_never_writes_through_it(
    context: ToolContext, quota: Quota, tmp_path: Path
) -> None:
    """The saver writes as the workspace's owner: following a symlink would let a snippet write
    anywhere that owner may (the worker's own files, when the worker is not root)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (context.workspace / "escape").symlink_to(outside)
    code = """
import os
os.remove("escape")
os.mkdir("escape")
open("escape/planted.txt", "w").write("inside")
"""
    assert run(context, code).ok

    assert not (context.workspace / "escape").is_symlink()
    assert (context.workspace / "escape" / "planted.txt").read_text() == "inside"
    assert list(outside.iterdir()) == []


def test_the_bound_holds_when_the_worker_is_not_root(workspaces: Path, settings) -> None:
    """sandbox/overlay.py runs as whoever runs snippets: a sandbox uid under a root worker, the
    worker's own uid otherwise. Run it directly as an unprivileged uid, without the sandbox."""
    settings.LOOP_WORKSPACE_MAX_BYTES = 5 * MB
    settings.LOOP_WORKSPACE_MAX_FILES = 100
    unprivileged = 65534
    workspace = workspaces / "plain"
    workspace.mkdir(mode=0o700)
    identity: list[str] = []
    if os.geteuid() == 0:
        os.chown(workspace, unprivileged, unprivileged)
        identity = ["setpriv", f"--reuid={unprivileged}", f"--regid={unprivileged}"]
        identity += ["--clear-groups", "--no-new-privs", "--"]
    fill = f"""
import os
for number in range(30):
    with open(os.path.join({str(workspace)!r}, f"fill-{{number}}.bin"), "wb") as file:
        file.write(os.urandom(1_000_000))
"""
    snippet = [settings.LOOP_SANDBOX_PYTHON, "-I", "-c", fill]
    saver = Channel()
    saver.give(None, 0)  # as the worker does when it gives a sandbox its program
    finished = subprocess.run(
        [*identity, *quota_prefix(workspace, saver.saver_end()), *snippet],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        pass_fds=(saver.saver_end(),),
    )
    saver.handed_over()
    assert saver.outcome() == (True, "")

    assert finished.returncode == 1, finished.stderr
    assert "No space left on device" in finished.stderr
    assert "Workspace quota reached" in finished.stderr
    assert usage(workspace).bytes <= 5 * MB + FILE_CAP
    assert usage(workspace).files <= 100


def test_two_snippets_at_once_do_not_share_out_the_quota_twice(
    context: ToolContext, quota: Quota
) -> None:
    """Each upper layer is a whole quota's size; the savers, one at a time under the workspace's
    lock, count what the other saved."""

    def fill(prefix: str) -> ToolResult:
        code = f"""
import os

for number in range(15):
    with open(f"{prefix}-{{number}}.bin", "wb") as file:
        file.write(os.urandom(2_000_000))
"""
        return run(context, code)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(fill, ["first", "second"]))

    assert usage(context.workspace).bytes <= quota.max_bytes + FILE_CAP
    assert any("Not saved, over the quota" in result.text for result in results)
