"""Each user's own process budget: one user's snippets holding every process they may have do not
stop another user's run_code, the refusal names the process limit, and each workspace belongs to
its user's own sandbox uid (one the shared sandbox user owned is handed over on use)."""

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

import psutil

from core.results import ToolStatus
from tools.base import ToolContext
from workspace.directory import ensure_workspace, sandbox_identity

from .conftest import wait_for
from .sandboxes import SANDBOX
from .test_run_code import fresh_user_id, run, sandbox_processes, user_context

# Forks until the kernel refuses, then holds every process it got.
HOLD_EVERY_PROCESS = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(120)\n"
    "            os._exit(0)\n"
    "    except OSError as refused:\n"
    "        print('refused:', refused, flush=True)\n"
    "        break\n"
    "time.sleep(120)\n"
)


def test_one_users_snippets_at_their_process_limit_do_not_stop_anothers(workspaces, settings):
    settings.LOOP_SANDBOX_MAX_PROCESSES = 24
    alice, bob = user_context(workspaces, "alice"), user_context(workspaces, "bob")
    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(run, alice, HOLD_EVERY_PROCESS, 60)
        wait_for(
            lambda: len(sandbox_processes(alice)) >= 24,
            "alice's snippet to hold her whole process budget",
            60,
        )
        bobs = run(bob, "print('bob ran')")
        alices_next = run(alice, "print('alice ran')")
        for process in sandbox_processes(alice):  # as an operator would, not to wait 60 s
            with suppress(psutil.NoSuchProcess):  # gone with its namespace's init
                process.kill()
        held = holding.result()
    assert "refused: [Errno 11] Resource temporarily unavailable" in held.text
    assert bobs.status is ToolStatus.OK
    assert "bob ran" in bobs.text
    assert alices_next.status is ToolStatus.ERROR
    assert "your snippets are at their process limit (24 processes" in alices_next.text
    assert "namespace" not in alices_next.text
    assert "alice ran" not in alices_next.text


def test_each_user_runs_as_a_uid_of_their_own(workspaces):
    alice, bob = user_context(workspaces, "alice"), user_context(workspaces, "bob")
    code = "import os; print('ids', os.getuid(), os.getgid(), os.stat('.').st_uid)"
    for user in (alice, bob):
        uid = sandbox_identity(user.user_id).uid
        assert f"ids {uid} {uid} {uid}" in run(user, code).text
        assert os.stat(user.workspace).st_uid == uid


def test_a_workspace_the_shared_sandbox_user_owned_is_handed_over(workspaces):
    user_id = fresh_user_id()
    workspace = workspaces / str(user_id)
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "todo.txt").write_text("from before")
    (workspace / "link").symlink_to("/etc/passwd")
    outside = workspaces / "outside.txt"
    outside.write_text("not the user's")
    os.link(outside, workspace / "hard-link.txt")
    shared = 999  # the one loop-sandbox user every snippet ran as before
    for path in (workspace, workspace / "notes", workspace / "notes" / "todo.txt", outside):
        os.chown(path, shared, shared)
    os.chown(workspace / "link", shared, shared, follow_symlinks=False)

    ensure_workspace(workspace, user_id)

    identity = sandbox_identity(user_id)
    for path in (workspace, workspace / "notes", workspace / "notes" / "todo.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (identity.uid, identity.gid)
    assert (workspace / "link").lstat().st_uid == identity.uid  # the link, never its target
    assert os.stat("/etc/passwd").st_uid == 0
    assert outside.stat().st_uid == shared  # another name for it is outside the workspace
    context = ToolContext(user_id=user_id, username="alice", workspace=workspace, sandbox=SANDBOX)
    edited = run(context, "open('notes/todo.txt', 'a').write(' and now'); print('edited')")
    assert edited.status is ToolStatus.OK
