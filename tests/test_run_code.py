"""run_code under bubblewrap: the happy path, and attacks that must each end safely."""

import json
import os
import re
import secrets
import socket
import uuid
from pathlib import Path

import psutil
import pytest
from django.conf import settings
from django.test import override_settings

from core.results import ToolResult, ToolStatus
from sandbox.bubblewrap import BubblewrapSandbox
from sandbox.errors import SandboxUnavailable
from sandbox.policies import Limits
from sandbox.pool import WarmSandboxes
from tools.base import ToolContext, ToolRegistry
from tools.code import RUN_CODE
from workspace.directory import UidOutOfRange, ensure_workspace, sandbox_identity

from .conftest import PROJECT_DIR, wait_for
from .sandboxes import SANDBOX, bubblewrap

WARM = SANDBOX.pool  # the sandboxes the tests' host started ahead


def fresh_user_id() -> int:
    """A user id (so a sandbox uid) no other test, nor another checkout's suite, is using now."""
    return 10_000_000 + secrets.randbelow(100_000_000)


def user_context(workspaces: Path, username: str = "alice") -> ToolContext:
    user_id = fresh_user_id()
    workspace = ensure_workspace(workspaces / str(user_id), user_id)
    return ToolContext(user_id=user_id, username=username, workspace=workspace, sandbox=SANDBOX)


@pytest.fixture
def context(workspaces: Path) -> ToolContext:
    return user_context(workspaces)


def run(context: ToolContext, code: str, timeout: int = 10) -> ToolResult:
    arguments = json.dumps({"code": code, "timeout": timeout})
    return ToolRegistry([RUN_CODE]).dispatch("run_code", arguments, context)


def sandbox_processes(context: ToolContext) -> list[psutil.Process]:
    """Live processes a snippet of this user could have left behind: any process of their
    sandbox uid (bwrap, the interpreter, whatever it started).

    Zombies do not count: they run nothing, and the sandbox's reaper takes each as it ends.
    """
    identity = sandbox_identity(context.user_id)
    if identity is None:  # all snippets run as the worker's uid: look at bwrap and the interpreter
        interpreter = os.path.realpath(settings.LOOP_SANDBOX_PYTHON)
        return [
            process
            for process in psutil.process_iter(["uids", "exe", "name", "status"])
            if process.info["status"] != psutil.STATUS_ZOMBIE
            and process.info["uids"].real == os.getuid()
            and (process.info["name"] == "bwrap" or process.info["exe"] == interpreter)
        ]
    return [
        process
        for process in psutil.process_iter(["uids", "status"])
        if process.info["status"] != psutil.STATUS_ZOMBIE
        and process.info["uids"]
        and process.info["uids"].real == identity.uid
    ]


def assert_no_sandbox_process_remains(context: ToolContext) -> None:
    """Killed sandboxes die asynchronously (bwrap's namespace init goes down when its parent
    does), so allow them a moment; anything still running after that was left behind."""
    WARM.drain()  # the sandbox started for the next call is not the snippet's doing
    wait_for(lambda: not sandbox_processes(context), "the sandbox's processes to end", 10)


def test_runs_a_snippet_and_returns_its_output_and_policy(context):
    result = run(context, "import sys; print(sum(range(1, 101))); print('oops', file=sys.stderr)")
    assert result.status is ToolStatus.OK
    assert "exit status: 0" in result.text
    assert "5050" in result.text
    assert "oops" in result.text
    assert result.policy == "bubblewrap"
    assert result.duration > 0


def test_snippet_sees_and_writes_only_its_workspace(context):
    (context.workspace / "input.txt").write_text("from the host")
    result = run(context, "print(open('input.txt').read()); open('out.txt', 'w').write('made')")
    assert "from the host" in result.text
    assert (context.workspace / "out.txt").read_text() == "made"


def test_a_raising_snippet_is_an_error_result_with_its_traceback(context):
    result = run(context, "raise ValueError('bad input')")
    assert result.status is ToolStatus.ERROR
    assert "ValueError: bad input" in result.text
    assert result.policy == "bubblewrap"


def test_no_network_even_to_a_listening_local_port(context):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        listener.settimeout(0.5)
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('CONNECTED')\n"
            "except OSError as error:\n"
            "    print('refused:', error)\n"
        )
        result = run(context, code)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert "refused:" in result.text
    assert "CONNECTED" not in result.text


def test_host_files_are_invisible(context):
    code = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        f"for path in ['/etc/passwd', {str(PROJECT_DIR / 'manage.py')!r}, '/root', '/home']:\n"
        "    print(path, os.path.exists(path))\n"
    )
    result = run(context, code)
    assert result.status is ToolStatus.OK
    assert (
        "['bin', 'dev', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr', 'workspace']" in result.text
    )
    assert " True" not in result.text


def test_nothing_outside_the_workspace_is_writable(context):
    marker = f"loop-escape-{uuid.uuid4().hex}"
    code = (
        "for path in ['/usr/evil', '/evil', '/dev/evil', '/workspace/../evil']:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as error:\n"
        "        print('refused', path, error.strerror)\n"
        f"open('/tmp/{marker}', 'w').write('private tmpfs')\n"
    )
    result = run(context, code)
    assert "WROTE" not in result.text
    assert result.text.count("refused") == 4
    assert not Path("/tmp", marker).exists()


def test_environment_holds_no_secrets(context, monkeypatch):
    monkeypatch.setenv("GROQ_API_KEY", "gsk-not-for-snippets")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/loop")
    code = (
        "import os, glob\n"
        "print(sorted(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    print(open(path, 'rb').read())\n"
    )
    result = run(context, code)
    assert result.status is ToolStatus.OK
    assert "gsk-not-for-snippets" not in result.text
    assert "secret@db" not in result.text
    assert (
        "['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED']"
        in result.text
    )


def test_host_processes_are_invisible_and_privileges_are_gone(context):
    code = (
        "import ctypes, os\n"
        "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print('caps', [l for l in open('/proc/self/status') if l.startswith('CapEff')])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('new user namespace', libc.unshare(0x10000000), ctypes.get_errno() != 0)\n"
        "try:\n"
        "    os.setuid(0)\n"
        "    print('BECAME ROOT')\n"
        "except OSError:\n"
        "    print('setuid refused')\n"
    )
    result = run(context, code)
    assert "pids [1, 2]" in result.text  # bwrap's init and the snippet: no host process
    assert "CapEff:\\t0000000000000000" in result.text
    assert "new user namespace -1 True" in result.text
    assert "setuid refused" in result.text


def test_fork_bomb_is_bounded_and_leaves_nothing_running(context):
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = run(context, code, timeout=3)
    assert result.status in {ToolStatus.TIMEOUT, ToolStatus.ERROR}
    assert_no_sandbox_process_remains(context)


def test_memory_bomb_gets_memory_error(context):
    result = run(context, "block = bytearray(4 * 1024 ** 3)")
    assert result.status is ToolStatus.ERROR
    assert "MemoryError" in result.text


def test_a_100_mb_file_is_cut_off_by_the_file_size_limit(context):
    code = (
        "chunk = b'x' * (1024 * 1024)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(100):\n"
        "        f.write(chunk)\n"
    )
    result = run(context, code)
    assert result.status is ToolStatus.ERROR
    assert "File too large" in result.text
    assert (context.workspace / "big.bin").stat().st_size <= 16 * 1024 * 1024


def test_tmp_is_small(context):
    result = run(context, "open('/tmp/fill', 'wb').write(b'x' * 100 * 1024 * 1024)")
    assert result.status is ToolStatus.ERROR
    assert "No space left" in result.text or "File too large" in result.text


def test_endless_loop_times_out_and_is_killed(context):
    result = run(context, "while True:\n    pass\n", timeout=2)
    assert result.status is ToolStatus.TIMEOUT
    assert "Killed after 2 seconds" in result.text
    assert_no_sandbox_process_remains(context)


def test_sleep_past_the_timeout_is_killed(context):
    result = run(context, "import time\nprint('before', flush=True)\ntime.sleep(60)", timeout=1)
    assert result.status is ToolStatus.TIMEOUT
    assert "before" in result.text  # partial output is kept


def test_double_forked_background_process_does_not_outlive_the_call(context):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            with open('beat', 'a') as f:\n"
        "                f.write('.')\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('parent done')\n"
    )
    result = run(context, code, timeout=10)
    assert result.status is ToolStatus.OK  # returned when the snippet ended, not at the deadline
    assert_no_sandbox_process_remains(context)  # the beating grandchild went with the sandbox


def test_stdout_flood_is_capped_and_the_worker_stays_small(context):
    worker = psutil.Process()
    before = worker.memory_info().rss
    code = "import sys\nchunk = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(chunk)\n"
    result = run(context, code, timeout=3)
    assert result.status is ToolStatus.TIMEOUT
    assert "[output over the cap was discarded]" in result.text
    assert len(result.text) < 100_000
    assert worker.memory_info().rss - before < 50 * 1024 * 1024
    assert_no_sandbox_process_remains(context)


def assert_plainly_refused(result, caplog, detail: str) -> None:
    """A sandbox that cannot run is refused in plain words for the model and the person (no
    package, setting or command: nothing they can act on), its fix in the operator's log."""
    assert result.status is ToolStatus.DENIED
    assert result.text == SandboxUnavailable.SAID
    assert detail in caplog.text


def test_missing_bubblewrap_fails_closed_saying_how_to_fix_it(context, monkeypatch, caplog):
    real_which = __import__("shutil").which
    monkeypatch.setattr(
        "sandbox.programs.shutil.which",
        lambda name, path=None: None if name == "bwrap" else real_which(name, path=path),
    )
    result = run(context, "print('ran')")
    assert_plainly_refused(result, caplog, "apt-get install bubblewrap")


def test_a_sandbox_bubblewrap_cannot_build_fails_closed(context, monkeypatch, caplog):
    build = BubblewrapSandbox.bwrap_arguments

    def broken(self, workspace, limits):
        arguments = build(self, workspace, limits)
        return [arguments[0], "--bind", "/nonexistent-loop-path", "/x", *arguments[1:]]

    monkeypatch.setattr(BubblewrapSandbox, "bwrap_arguments", broken)
    result = run(context, "print('ran')")
    assert_plainly_refused(result, caplog, "bubblewrap could not build the sandbox")
    assert "LOOP_SANDBOX=subprocess" in caplog.text


def test_a_workspace_no_sandbox_uid_owns_is_refused(context, caplog):
    os.chown(context.workspace, 0, 0)  # as if made by hand, or by an older Loop that failed
    result = run(context, "print('ran')")
    assert_plainly_refused(result, caplog, "not to a sandbox uid")


def test_a_uid_base_that_would_reach_root_or_overflow_refuses(workspaces, settings):
    settings.LOOP_SANDBOX_UID_BASE = 0
    with pytest.raises(UidOutOfRange, match="LOOP_SANDBOX_UID_BASE"):
        ensure_workspace(workspaces / "0", 0)
    settings.LOOP_SANDBOX_UID_BASE = 2**31 - 10
    with pytest.raises(UidOutOfRange, match="LOOP_SANDBOX_UID_BASE"):
        ensure_workspace(workspaces / "20", 20)


def test_snippet_never_runs_as_root(context):
    result = run(context, "import os; print('uid', os.getuid(), os.geteuid())")
    assert result.status is ToolStatus.OK  # the snippet ran: one that failed printed no uid
    [(uid, euid)] = re.findall(r"uid (\d+) (\d+)", result.text)
    identity = sandbox_identity(context.user_id)
    expected = identity.uid if identity is not None else os.getuid()  # the worker's own, not root
    assert int(uid) == int(euid) == expected != 0


def test_subprocess_mode_is_opt_in_and_marks_every_result(context):
    with override_settings(LOOP_SANDBOX="subprocess"):
        ok = run(context, "import os; print(os.getcwd())")
        failed = run(context, "raise SystemExit(3)")
    assert ok.status is ToolStatus.OK
    assert str(context.workspace) in ok.text
    assert ok.policy == failed.policy == "subprocess (no isolation)"


def test_the_next_call_gets_a_fresh_sandbox_started_ahead(context):
    first = run(context, "open('/tmp/left-behind', 'w').write('x'); import os; print(os.getpid())")
    assert (context.workspace, Limits.from_settings(10)) in WARM.idle
    served = WARM.served
    second = run(context, "import os; print(os.path.exists('/tmp/left-behind'))")
    assert first.status is second.status is ToolStatus.OK
    assert WARM.served == served + 1
    assert "False" in second.text  # a new sandbox: nothing of the last snippet survives


def test_a_warm_sandbox_serves_only_its_own_workspace(workspaces):
    alice, bob = user_context(workspaces, "alice"), user_context(workspaces, "bob")
    (alice.workspace / "alice.txt").write_text("private")
    run(alice, "print('warming alice')")
    alices = (alice.workspace, Limits.from_settings(10))
    assert alices in WARM.idle  # a sandbox of alice's waits: bob's call is the one it must refuse
    served = WARM.served
    result = run(bob, "import os; print(os.listdir('.'))")
    assert "alice.txt" not in result.text
    assert "[]" in result.text
    assert WARM.served == served  # bob's call started a sandbox of its own
    assert alices in WARM.idle  # alice's is still hers


def test_an_unused_warm_sandbox_expires(context):
    pool = WarmSandboxes(idle_seconds=0.2)
    pool.prepare(context.workspace, Limits(), bubblewrap().launch)
    [warm] = pool.idle.values()
    warm.sandbox.result().process.wait(timeout=5)
    wait_for(lambda: pool.idle == {}, "the expired sandbox to leave the pool", 5)


def test_draining_also_kills_a_sandbox_still_starting(context):
    pool = WarmSandboxes()
    pool.prepare(context.workspace, Limits(), bubblewrap().launch)
    [warm] = pool.idle.values()
    pool.drain()  # at once: the launcher may not have forked it yet
    assert pool.idle == {}
    assert warm.sandbox.result().process.returncode is not None
    assert_no_sandbox_process_remains(context)


def test_warm_sandboxes_can_be_turned_off(context, settings):
    settings.LOOP_SANDBOX_WARM = False
    WARM.drain()
    run(context, "print(1)")
    assert WARM.idle == {}
