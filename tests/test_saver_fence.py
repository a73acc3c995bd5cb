"""What a snippet's saver may write: fenced like its run's events (a saver whose run was taken over
saves nothing), never over another call's change, and never silently short (a full disk).

Real sandboxes and savers throughout; a frozen saver is a SIGSTOPped one, as in a frozen VM.
"""

import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from agent.llm.scripted import ScriptedLLM, answer, calls
from agent.models import AgentRun
from agent.runs import new_conversation, start_run, submit_run
from core.events import RunStatus
from core.loop import Limits as RunLimits
from core.results import ToolStatus
from engine.execution import execute_run
from sandbox.fence import raise_fence, started_moment
from sandbox.policies import Limits
from sandbox.process import Launched
from sandbox.snippet import Execution, ForRun
from tools.base import ToolContext, ToolRegistry
from tools.code import RUN_CODE
from tools.files import WRITE_FILE
from workspace.directory import ensure_workspace, workspace_path

from .conftest import wait_for
from .groq_server import groq_server_fixture, tool_call  # noqa: F401 (the fixture)
from .sandboxes import SANDBOX, bubblewrap
from .test_run_code import run
from .test_worker import MODEL, on_groq, started, status_of  # noqa: F401 (on_groq: a fixture)

NOTES = "notes.txt"
APPEND = "with open({name!r}, 'a') as notes:\n    notes.write({line!r})\n"
# How a call's result names the copy of its version of the notes, set beside another call's.
SET_ASIDE = re.compile(
    r"notes\.txt \(this program's version is saved as "
    r"(notes \(conflict from run \d+(?:, \d+)?\)\.txt)\)"
)


def fresh_workspace(workspaces: Path) -> tuple[int, Path]:
    user_id = 10_000_000 + secrets.randbelow(100_000_000)
    return user_id, ensure_workspace(workspaces / str(user_id), user_id)


def saver_of(sandbox: Launched) -> psutil.Process:
    """The saver sandbox/overlay.py forked for this sandbox: the one child still running it."""

    def found() -> psutil.Process | None:
        for child in psutil.Process(sandbox.process.pid).children():
            if any(part.endswith("overlay.py") for part in child.cmdline()):
                return child
        return None

    return wait_for(found, "the sandbox's saver")


def owned(workspace: Path, path: Path) -> None:
    """Give what the test made to the workspace's owner, as a file tool's write would."""
    owner = workspace.stat()
    os.chown(path, owner.st_uid, owner.st_gid)


def put(workspace: Path, name: str, text: str) -> None:
    (workspace / name).write_text(text)
    owned(workspace, workspace / name)


class FrozenSaver:
    """A sandbox started ahead whose saver is stopped (SIGSTOP) before it is given its program,
    so that the program runs and ends and its saver saves only once it is woken."""

    def __init__(self, workspace: Path) -> None:
        self.limits = Limits(timeout=20)
        self.sandbox = bubblewrap().launch(workspace, self.limits).result()
        self.saver = saver_of(self.sandbox)
        self.saver.suspend()
        self.pool = ThreadPoolExecutor(1)

    def run(self, code: str, run: ForRun) -> Future[Execution]:
        return self.pool.submit(self.sandbox.finish, code, self.limits, "bubblewrap", run=run)

    def wake(self) -> None:
        with suppress(psutil.NoSuchProcess):  # it saved and ended
            self.saver.resume()


@pytest.fixture
def frozen(workspaces: Path) -> Iterator[tuple[Path, FrozenSaver]]:
    _, workspace = fresh_workspace(workspaces)
    frozen = FrozenSaver(workspace)
    yield workspace, frozen
    frozen.wake()
    frozen.pool.shutdown()


def test_a_saver_whose_run_was_taken_over_meanwhile_saves_nothing(frozen) -> None:
    """Finding 11: the snippet of attempt 1 writes the file and ends; its saver is frozen. The run
    is taken over (attempt 2), which writes the file; the stale saver wakes: the file keeps the
    new content, and the stale call's result says nothing was saved."""
    workspace, sandbox = frozen
    raise_fence(workspace, 41, 1)
    stale = sandbox.run(f"open({NOTES!r}, 'w').write('stale\\n')", ForRun(41, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the stale snippet to end")

    raise_fence(workspace, 41, 2)  # as the claim of a worker taking the run over does
    put(workspace, NOTES, "taken over\n")  # as the new attempt's write does
    sandbox.wake()

    execution = stale.result(timeout=60)
    assert (workspace / NOTES).read_text() == "taken over\n"
    assert not execution.files_saved
    assert "taken over" in execution.files_note
    assert "Not saved" in execution.stderr


def test_a_sandbox_started_ahead_saves_for_the_attempt_of_the_call_it_ran(frozen) -> None:
    """A warm sandbox started while the run was at attempt 1 and given its program by attempt 2
    saves: the attempt is the one of the call that ran it, told when it was taken."""
    workspace, sandbox = frozen
    raise_fence(workspace, 42, 1)
    raise_fence(workspace, 42, 2)
    sandbox.wake()

    execution = sandbox.run(f"open({NOTES!r}, 'w').write('mine\\n')", ForRun(42, attempt=2))

    assert execution.result(timeout=60).files_saved
    assert (workspace / NOTES).read_text() == "mine\n"


def test_another_run_s_takeover_does_not_fence_this_run(frozen) -> None:
    workspace, sandbox = frozen
    raise_fence(workspace, 43, 1)
    raise_fence(workspace, 44, 5)
    sandbox.wake()

    execution = sandbox.run(f"open({NOTES!r}, 'w').write('mine\\n')", ForRun(43, attempt=1))

    assert execution.result(timeout=60).files_saved
    assert (workspace / NOTES).read_text() == "mine\n"


def test_a_change_made_while_a_snippet_ran_is_kept_and_the_snippet_s_beside_it(frozen) -> None:
    """Finding 12, at its smallest: a file changed by another call after this snippet started
    keeps that change; this snippet's version is saved beside it, and its result says where."""
    workspace, sandbox = frozen
    put(workspace, NOTES, "first\n")
    put(workspace, "gone.txt", "keep me\n")
    code = (
        f"open({NOTES!r}, 'a').write('ours\\n')\n"
        "import os\nos.remove('gone.txt')\n"
        "open('other.txt', 'w').write('ours alone\\n')\n"
    )
    execution = sandbox.run(code, ForRun(45, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    put(workspace, NOTES, "theirs\n")  # another call's rewrite, meanwhile
    put(workspace, "gone.txt", "changed, keep me\n")
    sandbox.wake()

    done = execution.result(timeout=60)
    assert done.files_saved
    aside = workspace / "notes (conflict from run 45).txt"
    assert (workspace / NOTES).read_text() == "theirs\n"
    assert aside.read_text() == "first\nours\n"
    assert f"{NOTES} (this program's version is saved as {aside.name})" in done.files_note
    assert (workspace / "gone.txt").read_text() == "changed, keep me\n"
    assert "Not deleted, because another call changed them while this program ran: gone.txt" in (
        done.files_note
    )
    assert (workspace / "other.txt").read_text() == "ours alone\n"  # no clash: merged


def test_a_directory_another_call_changed_is_neither_deleted_nor_replaced(frozen) -> None:
    """Directories merge entry by entry; one the snippet deleted, or deleted and made anew, while
    another call added to it, keeps that call's entries, and the snippet's new one is set aside."""
    workspace, sandbox = frozen
    for name in ("old", "made"):
        (workspace / name).mkdir()
        owned(workspace, workspace / name)
        put(workspace, f"{name}/kept.txt", "before\n")
    code = (
        "import os, shutil\n"
        "shutil.rmtree('old')\n"
        "shutil.rmtree('made')\nos.mkdir('made')\nopen('made/ours.txt', 'w').write('ours\\n')\n"
    )
    execution = sandbox.run(code, ForRun(46, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    put(workspace, "old/theirs.txt", "theirs\n")  # another call's save, meanwhile
    put(workspace, "made/theirs.txt", "theirs\n")
    sandbox.wake()

    done = execution.result(timeout=60)
    assert done.files_saved, done
    assert sorted(os.listdir(workspace / "old")) == ["kept.txt", "theirs.txt"]
    assert sorted(os.listdir(workspace / "made")) == ["kept.txt", "theirs.txt"]
    aside = workspace / "made (conflict from run 46)"
    assert sorted(os.listdir(aside)) == ["ours.txt"]
    assert f"made (this program's version is saved as {aside.name})" in done.files_note
    assert "Not deleted, because another call changed them while this program ran: old" in (
        done.files_note
    )


def test_a_call_s_change_just_before_a_snippet_starts_is_no_clash(workspaces: Path) -> None:
    """File change times tick coarsely: a write_file right before run_code (the same tick, as a
    quick model makes it) must not read as a change made while the snippet ran."""
    user_id, workspace = fresh_workspace(workspaces)
    tools = ToolRegistry([RUN_CODE, WRITE_FILE])
    context = ToolContext(user_id=user_id, username="alice", workspace=workspace, sandbox=SANDBOX)
    code = APPEND.format(name=NOTES, line="appended\n")
    for number in range(20):
        content = json.dumps({"path": NOTES, "content": f"{number}\n"})
        assert tools.dispatch("write_file", content, context).ok
        result = tools.dispatch("run_code", json.dumps({"code": code}), context)
        assert result.ok, result.text
        assert "another call" not in result.text
        assert (workspace / NOTES).read_text() == f"{number}\nappended\n"


@pytest.fixture
def beside(frozen) -> tuple[Path, FrozenSaver, ToolContext]:
    """A frozen sandbox, and a context whose calls run in sandboxes of their own beside it on the
    same workspace; its notes made by write_file, as a model's first call would."""
    workspace, sandbox = frozen
    context = ToolContext(int(workspace.name), "alice", workspace, sandbox=SANDBOX)
    write = json.dumps({"path": NOTES, "content": "first\nsecond\n"})
    assert ToolRegistry([WRITE_FILE]).dispatch("write_file", write, context).ok
    return workspace, sandbox, context


APPEND_OURS = APPEND.format(name=NOTES, line="ours\n")
APPEND_THEIRS = APPEND.format(name=NOTES, line="theirs\n")


def test_an_append_while_another_call_appended_is_saved_after_that_call_s(beside) -> None:
    """Issue 39 §6, at its smallest: a snippet appends a line while another call appends one and
    saves first: the file has both lines after what both started from, and no copy beside it."""
    workspace, sandbox, context = beside
    execution = sandbox.run(APPEND_OURS, ForRun(47, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    assert run(context, APPEND_THEIRS).ok  # another call's, in a sandbox of its own, saved
    sandbox.wake()

    done = execution.result(timeout=60)
    assert done.files_saved
    assert (workspace / NOTES).read_text() == "first\nsecond\ntheirs\nours\n"
    assert sorted(os.listdir(workspace)) == [NOTES]
    assert f"what that call added: {NOTES}." in done.files_note


def test_an_append_taken_over_meanwhile_is_not_merged(beside) -> None:
    """The fence holds for appends too: a snippet whose run was taken over while another call
    appended saves nothing, merged or not."""
    workspace, sandbox, context = beside
    raise_fence(workspace, 49, 1)
    execution = sandbox.run(APPEND_OURS, ForRun(49, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    raise_fence(workspace, 49, 2)
    assert run(context, APPEND_THEIRS).ok
    sandbox.wake()

    done = execution.result(timeout=60)
    assert not done.files_saved
    assert (workspace / NOTES).read_text() == "first\nsecond\ntheirs\n"


@pytest.fixture
def full_after_theirs(settings) -> None:
    """A quota the workspace reaches, exactly, once another call appended `theirs`: the notes
    (13 bytes, then 20) and 1,000 bytes of ballast."""
    settings.LOOP_WORKSPACE_MAX_BYTES = 1_020
    settings.LOOP_WORKSPACE_MAX_FILES = 100


def test_an_append_past_the_quota_is_not_merged(full_after_theirs, beside) -> None:
    """A merged file counts whole against the quota: with the workspace at its quota after
    another call's append, what this snippet appended is not saved, and its stderr says so."""
    workspace, sandbox, context = beside
    put(workspace, "ballast.bin", "x" * 1_000)
    execution = sandbox.run(APPEND_OURS, ForRun(50, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    assert run(context, APPEND_THEIRS).ok
    sandbox.wake()

    done = execution.result(timeout=60)
    assert (workspace / NOTES).read_text() == "first\nsecond\ntheirs\n"
    assert sorted(os.listdir(workspace)) == ["ballast.bin", NOTES]
    assert f"[Not saved, over the quota: {NOTES}." in done.stderr


REWRITE = f"open({NOTES!r}, 'w').write('rewritten\\n')\n"
TRUNCATE = f"open({NOTES!r}, 'r+').truncate(len('first\\n'))\n"


ORIGINAL_AND_OURS = "first\nsecond\nours\n"


@pytest.mark.parametrize(
    ("ours", "theirs", "set_aside"),
    [
        (APPEND_OURS, REWRITE, ORIGINAL_AND_OURS),
        (APPEND_OURS, TRUNCATE, ORIGINAL_AND_OURS),
        (REWRITE, APPEND_THEIRS, "rewritten\n"),
        (TRUNCATE, APPEND_THEIRS, "first\n"),
    ],
    ids=[
        "append-while-rewritten",
        "append-while-cut",
        "rewrite-while-appended",
        "cut-while-appended",
    ],
)
def test_an_append_and_a_rewrite_or_cut_meanwhile_clash(beside, ours, theirs, set_aside) -> None:
    """Appends merge only when both sides only appended: a snippet that appended while another
    call rewrote or truncated the file, or rewrote or truncated it while another appended, leaves
    the other call's version and a conflict copy of its own beside it."""
    workspace, sandbox, context = beside
    execution = sandbox.run(ours, ForRun(48, attempt=1))
    wait_for(lambda: not sandbox.sandbox.alive(), "the snippet to end")
    assert run(context, theirs).ok  # another call's, in a sandbox of its own, saved
    kept = (workspace / NOTES).read_text()
    sandbox.wake()

    done = execution.result(timeout=60)
    assert done.files_saved
    aside = workspace / "notes (conflict from run 48).txt"
    assert (workspace / NOTES).read_text() == kept
    assert aside.read_text() == set_aside
    assert f"{NOTES} (this program's version is saved as {aside.name})" in done.files_note


@pytest.mark.django_db(transaction=True)
def test_twelve_parallel_appends_to_one_file_all_land_in_it(alice, workspaces) -> None:
    """Issue 39 §6: twelve run_code calls at once, each appending a line to a file write_file
    made: the file ends with its first content and all twelve lines, and no copy is beside it."""
    lines = [f"line-{number}" for number in range(12)]
    script = [
        calls(("write_file", {"path": NOTES, "content": "first\n"})),
        calls(*appends(NOTES, lines)),
        answer("Done."),
    ]
    limits = RunLimits(max_iterations=4, max_tool_calls=20, max_parallel_calls=12)
    run = execute_run(
        start_run(alice, "Append", model="mock", limits=limits), llm=ScriptedLLM(script)
    )

    workspace = workspace_path(alice.pk)
    written = (workspace / NOTES).read_text().splitlines()
    assert written[0] == "first"
    assert sorted(written[1:]) == sorted(lines)
    assert sorted(os.listdir(workspace)) == [NOTES]
    assert all(execution.status == ToolStatus.OK for execution in run.tool_executions.all())


def test_a_snippet_s_start_is_after_every_change_made_before_it(tmp_path: Path) -> None:
    """A file whose times were read gets its next change time from the fine clock (multigrain
    timestamps), past the coarse clock's last tick: the moment a snippet starts must still be
    after it, or the change reads as another call's, made while the snippet ran."""
    for number in range(100):
        handle = os.open(tmp_path / str(number), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.fstat(handle)
            os.write(handle, b"changed\n")
            changed_at = os.fstat(handle).st_ctime_ns
        finally:
            os.close(handle)
        assert changed_at < started_moment()


def appends(name: str, lines: list[str]) -> list[tuple[str, dict]]:
    return [("run_code", {"code": APPEND.format(name=name, line=line + "\n")}) for line in lines]


def lines_kept(run: AgentRun, workspace: Path, name: str) -> tuple[list[str], dict[str, str]]:
    """Every line a call of `run` appended, and where each is: in the file, or in the copy the
    call's own result names (a loser of a clash). A line in neither is lost."""
    where: dict[str, str] = {}
    for execution in run.tool_executions.order_by("pk"):
        line = re.search(r"notes.write\('([^\\']+)", execution.arguments).group(1)
        assert execution.status == ToolStatus.OK, execution.result
        aside = SET_ASIDE.search(execution.result)
        where[line] = aside.group(1) if aside else name
    missing = [
        line
        for line, file in where.items()
        if line not in (workspace / file).read_text().splitlines()
    ]
    return missing, where


def rounds(tag: str, count: int, width: int) -> list[list[str]]:
    return [[f"{tag}-r{r}-c{c}" for c in range(width)] for r in range(count)]


@pytest.mark.django_db(transaction=True)
def test_four_parallel_appends_to_one_file_lose_no_line(alice, workspaces) -> None:
    """Finding 12: turns of four run_code calls at once, each appending a line to one file, ten
    rounds: every line is in the file, or in the copy its call's result names."""
    lines = rounds("p", 10, 4)
    script = [calls(*appends(NOTES, batch)) for batch in lines] + [answer("Done.")]
    limits = RunLimits(max_iterations=12, max_tool_calls=60, max_parallel_calls=4)
    run = execute_run(
        start_run(alice, "Append", model="mock", limits=limits), llm=ScriptedLLM(script)
    )

    missing, where = lines_kept(run, workspace_path(alice.pk), NOTES)
    assert len(where) == 40
    assert missing == []


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_one_person_appending_to_one_file_lose_no_line(alice, workspaces) -> None:
    limits = RunLimits(max_iterations=10, max_tool_calls=20, max_parallel_calls=1)
    runs = [start_run(alice, f"Append {tag}", model="mock", limits=limits) for tag in "ab"]
    scripts = {
        run.pk: [calls(*appends(NOTES, batch)) for batch in rounds(tag, 8, 1)] + [answer("Done.")]
        for run, tag in zip(runs, "ab", strict=True)
    }

    def work(run: AgentRun) -> AgentRun:
        try:
            return execute_run(run, llm=ScriptedLLM(scripts[run.pk]))
        finally:
            from django.db import connection

            connection.close()

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(work, runs))

    for worked in done:
        missing, where = lines_kept(worked, workspace_path(alice.pk), NOTES)
        assert len(where) == 8
        assert missing == []


@pytest.fixture
def tiny_disk(workspaces: Path, settings) -> Iterator[Path]:
    """LOOP_WORKSPACES_DIR on a 1 MiB tmpfs of its own, so a test can fill the real disk."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    subprocess.run(
        ["/usr/bin/mount", "-t", "tmpfs", "-o", "size=1m,mode=0711", "tmpfs", str(workspaces)],
        check=True,
    )
    try:
        yield workspaces
    finally:
        subprocess.run(["/usr/bin/umount", "-l", str(workspaces)], check=True)


def test_a_save_the_full_disk_cuts_short_is_the_call_s_error_naming_what_is_lost(
    tiny_disk: Path,
) -> None:
    """Finding 13: the disk (not the quota) fills while the saver saves: the call is an error
    that names each file not saved, and every file it does not name is saved whole."""
    user_id, workspace = fresh_workspace(tiny_disk)
    context = ToolContext(user_id=user_id, username="alice", workspace=workspace, sandbox=SANDBOX)
    space = os.statvfs(workspace)
    (workspace / "ballast.bin").write_bytes(b"\0" * (space.f_bavail * space.f_frsize - 150_000))
    code = "for n in range(8):\n    open(f'part-{n}.bin', 'wb').write(bytes(40_000))\n"

    result = run(context, code)

    assert result.status is ToolStatus.ERROR
    assert "Saving this program's files failed (No space left on device)" in result.text
    named = re.search(r"Not saved: (.*)\. Everything else it wrote was saved", result.text)[1]
    for n in range(8):
        part = workspace / f"part-{n}.bin"
        if f"part-{n}.bin" in named:
            assert not part.exists()
        else:
            assert part.stat().st_size == 40_000
    assert "part-7.bin" in named


def test_a_snippet_that_writes_nothing_still_runs_with_a_full_disk(tiny_disk: Path) -> None:
    user_id, workspace = fresh_workspace(tiny_disk)
    context = ToolContext(user_id=user_id, username="alice", workspace=workspace, sandbox=SANDBOX)
    space = os.statvfs(workspace)
    (workspace / "ballast.bin").write_bytes(b"\0" * (space.f_bavail * space.f_frsize))

    assert run(context, "print('hello')").ok


def frozen_tree(worker: int) -> list[psutil.Process]:
    """Freeze a worker and every process below it (its sandboxes and their savers), worker
    first so that it starts nothing more meanwhile: a frozen VM, as far as they can tell."""
    top = psutil.Process(worker)
    top.suspend()
    below = top.children(recursive=True)
    for process in below:
        with suppress(psutil.NoSuchProcess):
            process.suspend()
    return [top, *below]


def ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.django_db(transaction=True)
def test_a_frozen_worker_s_snippet_writes_nothing_once_another_worker_took_its_run(
    alice,
    on_groq,  # noqa: F811 (the fixture imported above)
    groq_server,
    start_worker,
    workspaces,
) -> None:
    """Finding 11 end to end: a worker's whole tree is frozen (SIGSTOP) mid-snippet past
    LOOP_STALE_SECONDS; another worker resumes the run, which writes the file and ends; the
    tree wakes, the stale snippet ends and its saver saves nothing over the file."""
    stale = "open('notes.txt', 'w').write('stale\\n')\nimport time\ntime.sleep(3)\n"
    groq_server.reply(tool_calls=[tool_call("run_code", {"code": stale}, id="call_stale")])
    groq_server.reply(
        tool_calls=[tool_call("write_file", {"path": NOTES, "content": "new\n"}, id="call_new")]
    )
    groq_server.reply("Written.")
    run = submit_run(alice, "Write the notes", new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_stale"), "the snippet to start")
    wait_for(lambda: psutil.Process(first.pid).children(recursive=True), "its sandbox")
    tree = frozen_tree(first.pid)

    start_worker(**on_groq)
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run to succeed")
    assert (workspace_path(alice.pk) / NOTES).read_text() == "new\n"
    for process in tree:
        with suppress(psutil.NoSuchProcess):
            process.resume()
    wait_for(lambda: all(ended(process) for process in tree[1:]), "the woken snippet to end")

    assert (workspace_path(alice.pk) / NOTES).read_text() == "new\n"
