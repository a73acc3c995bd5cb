"""The sandbox's memory, bounded per snippet (all its processes and what it keeps in tmpfs) and per
person (their snippets running at once), by cgroups made below the worker's own; where none can
be made, a warning and a system check say so. Also: nothing in the sandbox shows the host's path
of the workspace, and each site derives its own sandbox uid range."""

import errno
import logging
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from core.results import ToolStatus
from loopsite.settings import sandbox_uid_base
from sandbox.cgroups import Tree, Unavailable, own_memory_cgroup
from sandbox.errors import SandboxUnavailable
from tools.base import ToolContext
from tools.checks import check_memory_bound
from workspace.directory import ensure_workspace, sandbox_identity

from .conftest import wait_for
from .sandboxes import SANDBOX
from .test_run_code import fresh_user_id, run, sandbox_processes, user_context

MEMORY, WARM = SANDBOX.cgroups, SANDBOX.pool  # the tests' host's

MIB = 1024 * 1024


def forking(children: int, mib: int) -> str:
    """A snippet that forks children each touching `mib` MiB and holding it a moment."""
    return (
        "import os, time\n"
        "pids = []\n"
        f"for _ in range({children}):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        f"        block = bytearray({mib} * 1024 * 1024)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(1)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "print('children', [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids])\n"
    )


def holding(mib: int, seconds: int) -> str:
    """A snippet that touches `mib` MiB in one process and holds it."""
    return (
        "import time\n"
        f"block = bytearray({mib} * 1024 * 1024)\n"
        "for i in range(0, len(block), 4096):\n"
        "    block[i] = 1\n"
        "print('held', flush=True)\n"
        f"time.sleep({seconds})\n"
    )


# 15 MiB in /tmp and 6 x 15 MiB in the workspace (its overlay's tmpfs until saved): each file
# under the 16 MiB file size limit, all together 105 MiB, in a process that holds little itself.
TMPFS_WRITES = (
    "chunk = b'x' * (15 * 1024 * 1024)\n"
    "open('/tmp/scratch', 'wb').write(chunk)\n"
    "for n in range(6):\n"
    "    open(f'part{n}', 'wb').write(chunk)\n"
    "print('wrote them all')\n"
)


def tree() -> Tree:
    state = MEMORY.state()
    assert isinstance(state, Tree), state
    return state


def person_cgroup(context: ToolContext) -> Path:
    return tree().directory / f"person-{sandbox_identity(context.user_id).uid}"


@pytest.fixture
def small_bounds(settings):
    settings.LOOP_SANDBOX_MEMORY_MB = 96
    settings.LOOP_SANDBOX_PERSON_MEMORY_MB = 128
    settings.LOOP_SANDBOX_WARM = False  # no sandbox started ahead to count against the person


def test_a_snippets_processes_together_over_its_bound_are_killed_saying_so(
    workspaces, small_bounds, settings
):
    context = user_context(workspaces)
    over = run(context, forking(children=4, mib=40))
    assert over.status is ToolStatus.ERROR
    assert over.text.startswith(
        "killed: the program's processes together used more than 96 MiB of memory"
    )
    settings.LOOP_SANDBOX_MEMORY_MB = 256
    settings.LOOP_SANDBOX_PERSON_MEMORY_MB = 1024
    under = run(context, forking(children=4, mib=40))
    assert under.status is ToolStatus.OK, under.text
    assert "children [0, 0, 0, 0]" in under.text


def test_what_a_snippet_writes_into_tmpfs_counts_against_its_bound(
    workspaces, small_bounds, settings
):
    context = user_context(workspaces)
    over = run(context, TMPFS_WRITES)
    assert over.status is ToolStatus.ERROR
    assert "used more than 96 MiB of memory" in over.text
    assert "wrote them all" not in over.text
    settings.LOOP_SANDBOX_MEMORY_MB = 256
    settings.LOOP_SANDBOX_PERSON_MEMORY_MB = 1024
    under = run(context, TMPFS_WRITES)
    assert under.status is ToolStatus.OK, under.text
    assert (context.workspace / "part5").stat().st_size == 15 * MIB


def test_a_persons_snippets_at_once_over_their_bound_lose_one_and_nobody_elses(
    workspaces, small_bounds
):
    alice, bob = user_context(workspaces, "alice"), user_context(workspaces, "bob")
    person_message = "your programs running at once together used more than 128 MiB of memory"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, alice, holding(70, 60), 60)
        wait_for(
            lambda: any(p.memory_info().rss >= 70 * MIB for p in sandbox_processes(alice)),
            "alice's first snippet to hold 70 MiB",
            60,
        )
        bobs = pool.submit(run, bob, holding(70, 0), 30)  # at the same time, another person
        second = run(alice, holding(70, 0), 30)
        if second.status is not ToolStatus.OK:  # the second was killed, the first holds on
            for process in sandbox_processes(alice):  # as an operator would, not to wait 60 s
                with suppress(psutil.NoSuchProcess):
                    process.kill()
        results = [first.result(), second]
        bobs = bobs.result()
    killed = [result for result in results if person_message in result.text]
    assert len(killed) == 1, [result.text for result in results]
    assert bobs.status is ToolStatus.OK, bobs.text
    assert "held" in bobs.text


def test_no_cgroup_is_left_behind(workspaces, small_bounds, settings):
    settings.LOOP_SANDBOX_WARM = True
    context = user_context(workspaces)
    assert run(context, "print('fine')").status is ToolStatus.OK
    assert run(context, forking(children=4, mib=40)).status is ToolStatus.ERROR
    assert list(person_cgroup(context).glob("snippet-*"))  # the one started ahead
    WARM.drain()
    assert not person_cgroup(context).exists()
    assert not list(tree().directory.glob(f"person-*/snippet-{os.getpid()}-*"))


@pytest.mark.parametrize(
    "cgroup",
    ["a directory that is no cgroup", "/sys/fs/cgroup/unified"],
)
def test_without_a_usable_cgroup_a_warning_and_the_check_say_so(
    workspaces, settings, caplog, tmp_path, cgroup
):
    if cgroup.startswith("/") and not Path(cgroup, "cgroup.controllers").exists():
        pytest.skip(f"{cgroup} is no cgroup v2 mount here")
    settings.LOOP_SANDBOX_CGROUP = cgroup if cgroup.startswith("/") else str(tmp_path)
    MEMORY.found.pop(settings.LOOP_SANDBOX_CGROUP, None)  # found afresh: warned at first use
    context = user_context(workspaces)
    with caplog.at_level(logging.WARNING, logger="sandbox.cgroups"):
        result = run(context, forking(children=4, mib=40))
    assert result.status is ToolStatus.OK, result.text  # bounded per process only
    [warning] = [record.getMessage() for record in caplog.records]
    assert "no memory bound per snippet and per person" in warning
    assert "memory controller" in warning
    [check] = check_memory_bound()
    assert check.id == "tools.W003"
    assert "cannot bound the memory of a snippet's processes together" in check.msg
    assert list(tmp_path.iterdir()) == []  # nothing made in what is no cgroup
    assert isinstance(MEMORY.state(), Unavailable)


def test_the_check_is_quiet_where_cgroups_bound_memory():
    assert isinstance(MEMORY.state(), Tree)
    assert check_memory_bound() == []


def test_nothing_in_the_sandbox_shows_the_hosts_path_of_the_workspace(workspaces):
    context = user_context(workspaces)
    code = (
        "import os\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    print(pid, open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' '))\n"
        "print(open('/proc/self/mountinfo').read())\n"
        "print(open('/proc/self/cgroup').read())\n"
        "print(os.listdir('/proc/self/fd'))\n"
    )
    result = run(context, code)
    assert result.status is ToolStatus.OK, result.text
    assert "1 b'/usr/bin/bwrap --args" in result.text  # bwrap's init: its options not in argv
    assert str(workspaces) not in result.text
    assert "loop-sandbox" not in result.text  # nor the cgroups it runs in


def test_each_site_derives_its_own_stable_sandbox_uid_range(settings, tmp_path):
    first, second = tmp_path / "site-a" / "workspaces", tmp_path / "site-b" / "workspaces"
    assert sandbox_uid_base(first) == sandbox_uid_base(first)  # the same on every start
    assert sandbox_uid_base(first) != sandbox_uid_base(second)
    for directory in (first, second, Path("/srv/loop/var/workspaces")):
        assert 1_900_000_000 <= sandbox_uid_base(directory) < 2**31 - 1 - 2**27
    if "LOOP_SANDBOX_UID_BASE" not in os.environ:
        assert sandbox_uid_base(settings.LOOP_WORKSPACES_DIR) == settings.LOOP_SANDBOX_UID_BASE


def test_a_workspace_of_the_old_fixed_uid_base_is_handed_over(workspaces, settings):
    user_id = fresh_user_id()
    workspace = workspaces / str(user_id)
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "todo.txt").write_text("from before")
    old = 1_900_000_000 + user_id  # whom the fixed default base made this user's snippets run as
    for path in (workspace, workspace / "notes", workspace / "notes" / "todo.txt"):
        os.chown(path, old, old)
    ensure_workspace(workspace, user_id)
    uid = sandbox_identity(user_id).uid
    assert uid != old
    assert os.stat(workspace / "notes" / "todo.txt").st_uid == uid
    context = ToolContext(user_id=user_id, username="alice", workspace=workspace, sandbox=SANDBOX)
    result = run(context, "print(open('notes/todo.txt').read())")
    assert result.status is ToolStatus.OK
    assert "from before" in result.text


@pytest.mark.parametrize("sandbox", ["bubblewrap", "subprocess"])
def test_a_snippet_its_cgroup_refuses_does_not_run(
    workspaces, monkeypatch, settings, sandbox, caplog
):
    """Where cgroups work but a snippet's own refuses its process, it fails closed, unbounded
    never."""
    settings.LOOP_SANDBOX = sandbox
    version = type(tree().version)
    monkeypatch.setattr(version, "entry_files", lambda self, snippet: [])  # the uid may not enter
    result = run(user_context(workspaces), "print('ran')")
    assert result.status is ToolStatus.DENIED
    assert result.text == SandboxUnavailable.SAID  # plain words; the operator's log says why
    assert "cannot bound the snippet's memory" in caplog.text


def test_the_cgroups_a_killed_worker_left_are_removed_by_the_next(workspaces, settings):
    """A worker killed with -9 takes its sandboxes down (--die-with-parent), not their cgroups."""
    killed = subprocess.Popen(["/bin/sleep", "60"])  # stands in for the worker
    killed.kill()
    killed.wait()  # its pid now names no process
    context = user_context(workspaces)
    left = person_cgroup(context) / f"snippet-{killed.pid}-0"
    for directory in (left / "launch", left / "program"):
        directory.mkdir(parents=True)
    MEMORY.found.pop(settings.LOOP_SANDBOX_CGROUP)  # as a worker starting now finds its tree
    assert run(context, "print('fine')").status is ToolStatus.OK
    WARM.drain()
    assert not left.exists()
    assert not person_cgroup(context).exists()


HYBRID = (  # this VM: memory on a v1 hierarchy, an empty v2 one beside it
    "4:memory:/process_api/8b0c\n0::/\n",
    "35 31 0:32 / {mounts}/memory rw - cgroup cgroup rw,memory\n"
    "41 31 0:38 / {mounts}/unified rw - cgroup2 cgroup2 rw\n",
    "memory/process_api/8b0c",
    "cgroup v1",
)
UNIFIED = (  # a systemd host on cgroup v2 only
    "0::/system.slice/loop-worker.service/worker\n",
    "30 23 0:26 / {mounts} rw - cgroup2 cgroup2 rw,nsdelegate\n",
    "system.slice/loop-worker.service/worker",
    "cgroup v2",
)
CONTAINER = (  # a container in the host's cgroup namespace, its own cgroup mounted as the tree
    "0::/docker/abc\n",
    "600 590 0:26 /docker/abc {mounts} rw - cgroup2 cgroup2 rw\n",
    "",
    "cgroup v2",
)


@pytest.mark.parametrize("machine", [HYBRID, UNIFIED, CONTAINER], ids=["hybrid", "v2", "container"])
def test_the_workers_own_memory_cgroup_is_found_on_each_kind_of_machine(tmp_path, machine):
    cgroups, mounts, expected, version = machine
    (tmp_path / expected).mkdir(parents=True, exist_ok=True)
    if version == "cgroup v2":
        (tmp_path / expected / "cgroup.controllers").write_text("cpu io memory pids\n")
    mounts = mounts.format(mounts=tmp_path)
    directory, found = own_memory_cgroup(cgroups, mounts)
    assert (directory, found.name) == (tmp_path / expected, version)


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ENODEV], ids=["gone", "going"])
def test_a_persons_cgroup_removed_by_another_worker_meanwhile_is_made_again(
    workspaces, monkeypatch, code
):
    """Another worker removes a person's idle cgroup as this one puts a snippet in it: gone
    (ENOENT), or still listed but dead (ENODEV, which the kernel answers a mkdir in a cgroup
    being removed). The snippet's cgroup is made in the person's made again, and it runs."""
    refused: list[Path] = []
    mkdir = Path.mkdir

    def removed_once(self: Path, *args, **kwargs) -> None:
        if self.name.startswith("snippet-") and not refused:
            refused.append(self)
            raise OSError(code, os.strerror(code), str(self))
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", removed_once)
    result = run(user_context(workspaces), "print('ran')")
    assert refused
    assert result.status is ToolStatus.OK, result.text
    assert "ran" in result.text
