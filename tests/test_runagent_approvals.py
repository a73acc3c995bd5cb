"""`manage.py runagent` and tool calls that wait for a decision (issue 29): real runagent
processes on the test's database and the real sandbox, driven through a pseudo-terminal as a
person at a terminal drives them, with the site asking before every run_code call. The mock
answers "What is 17 * 23?" with one run_code call, `print(17 * 23)`, then with its output."""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator

import pytest

from agent.llm.scripted import ScriptedLLM, answer, calls
from agent.models import AgentRun
from agent.runs import new_conversation, start_run
from approvals.decisions import decide
from approvals.terminal import Terminal, decide_here
from approvals.waiting import CallDecision
from core.events import (
    ApprovalDecided,
    ApprovalRequested,
    Decision,
    ResumeReason,
    RunResumed,
    RunStatus,
)
from engine.execution import execute_run
from engine.management.commands.runagent import describe
from tests.conftest import PROJECT_DIR, child_environment, others_gone
from workspace.directory import workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "What is 17 * 23?"
CODE = "print(17 * 23)"
PROMPT = "run_code: approve, edit or deny? [a/e/d] "
WAITING_EXIT, STOPPED_ASKING_EXIT = 6, 130
TIMEOUT = 120


def take_the_terminal() -> None:
    """In the child, after its new session began: the pseudo-terminal on its stdin becomes its
    controlling terminal, so Ctrl-C typed there is its SIGINT, as in a person's shell."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PseudoTerminal:
    """A runagent process on a pseudo-terminal of its own: what it writes is read as it comes,
    what the test types reaches it as keystrokes (echoed, as a terminal does)."""

    def __init__(self, args: tuple[str, ...], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runagent", *args],
            cwd=PROJECT_DIR,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=take_the_terminal,
        )
        os.close(slave)
        self.output = ""
        self.seen = 0  # how far expect() has read
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the child closed the terminal: it exited
                chunk = b""
            with self.changed:
                self.output += chunk.decode(errors="replace").replace("\r\n", "\n")
                self.changed.notify_all()
            if not chunk:
                return

    def expect(self, text: str) -> str:
        """Wait until `text` comes (after what was expected before); says what came up to it."""
        with self.changed:
            found = self.changed.wait_for(
                lambda: text in self.output[self.seen :] or not self.reader.is_alive(),
                timeout=TIMEOUT,
            )
            at = self.output.find(text, self.seen)
            assert found, f"{text!r} never came; the terminal shows:\n{self.output}"
            assert at >= 0, f"{text!r} never came; the terminal shows:\n{self.output}"
            before, self.seen = self.output[self.seen : at], at + len(text)
        return before

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def exit_code(self) -> int:
        code = self.process.wait(timeout=TIMEOUT)
        self.reader.join(timeout=TIMEOUT)
        return code

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=TIMEOUT)
        self.reader.join(timeout=TIMEOUT)
        os.close(self.master)


@pytest.fixture
def asking_env(settings, worker_env) -> dict[str, str]:
    """The site asks before every run_code call, here and in runagent's processes, which have
    no $EDITOR unless a test gives one."""
    settings.LOOP_APPROVAL = "run_code=ask"
    env = child_environment(**worker_env, LOOP_APPROVAL="run_code=ask")
    env.pop("EDITOR", None)
    return env


@pytest.fixture
def in_a_terminal(asking_env) -> Iterator[Callable[..., PseudoTerminal]]:
    started: list[PseudoTerminal] = []

    def start(*args: str, **env: str) -> PseudoTerminal:
        started.append(PseudoTerminal(args, {**asking_env, **env}))
        return started[-1]

    yield start
    for terminal in started:
        terminal.close()
    others_gone()


@pytest.fixture
def without_a_terminal(asking_env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """runagent with its input from nowhere (a cron job, a pipe): no one to ask."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "runagent", *args],
            cwd=PROJECT_DIR,
            env=asking_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    return run


def the_run(user) -> AgentRun:
    return AgentRun.objects.get(user=user)


def runs_of_the_snippet(run: AgentRun) -> list[str]:
    """The arguments of each run_code call that started (the sandbox was asked to run it)."""
    started = run.events.filter(kind="tool_call_started", data__tool="run_code")
    return [
        json.loads(arguments)["code"]
        for arguments in started.values_list("data__arguments", flat=True)
    ]


def asked_about_the_call(terminal: PseudoTerminal) -> str:
    shown = terminal.expect(PROMPT)
    assert "run_code waits for a decision: The site asks before every run_code call." in shown
    assert "Why: The site asks before every run_code call." in shown
    assert f"  code:\n    {CODE}\n" in shown
    return shown


def test_approved_in_the_terminal_the_snippet_runs_once_and_the_run_ends_here(alice, in_a_terminal):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK)
    asked_about_the_call(terminal)
    run = the_run(alice)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert runs_of_the_snippet(run) == []  # nothing runs before the person says so

    terminal.type("a\n")
    terminal.expect("step 1  run_code approved by alice")
    terminal.expect("17 * 23 = 391")
    assert terminal.exit_code() == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == [CODE]
    assert list(run.tool_executions.values_list("status", flat=True)) == ["ok"]
    request = run.approvals.get()
    assert (request.decision, request.decided_by) == (Decision.APPROVE, alice)
    resumed = run.events.get(kind="run_resumed")
    assert resumed.data["reason"] == ResumeReason.DECIDED


def test_edited_in_editor_the_edited_code_runs_and_the_model_reads_its_output(alice, in_a_terminal):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK, EDITOR="sed -i s/17/19/")
    asked_about_the_call(terminal)
    terminal.type("e\n")
    terminal.expect("step 1  run_code edited and approved by alice")
    terminal.expect('step 1  run_code {"code": "print(19 * 23)"}')
    terminal.expect("17 * 23 = 437")  # the edited snippet's output
    assert terminal.exit_code() == 0
    run = the_run(alice)
    assert runs_of_the_snippet(run) == ["print(19 * 23)"]
    request = run.approvals.get()
    assert request.decision == Decision.EDIT
    assert json.loads(request.edited_arguments) == {"code": "print(19 * 23)"}


def test_an_invalid_edit_is_refused_with_the_reason_and_asked_again_then_a_valid_one_runs(
    alice, in_a_terminal
):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK)
    asked_about_the_call(terminal)
    terminal.type("e\n")
    terminal.expect(f'  Now: {{"code": "{CODE}"}}')
    terminal.type('{"code": 5}\n')
    refused = terminal.expect(PROMPT)
    assert "Refused: The edited arguments do not fit run_code: code: Input should be a valid " in (
        refused
    )
    run = the_run(alice)
    assert run.approvals.get().waiting  # the refusal changed nothing
    assert run.status == RunStatus.AWAITING_APPROVAL

    terminal.type("e\n")
    terminal.expect('  Now: {"code": 5}')  # the edit goes on from the person's last try
    writes = "open('edited.txt', 'a').write('ran\\n'); print(2 + 2)"
    terminal.type(json.dumps({"code": writes}) + "\n")
    terminal.expect("17 * 23 = 4")
    assert terminal.exit_code() == 0
    assert runs_of_the_snippet(run) == [writes]
    assert (workspace_path(alice.pk) / "edited.txt").read_text() == "ran\n"  # run once


def test_denied_with_a_reason_the_call_never_runs_and_the_model_answers_with_it(
    alice, in_a_terminal
):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK)
    asked_about_the_call(terminal)
    terminal.type("d\n")
    terminal.expect("Why? (optional; the model reads it) ")
    terminal.type("not on my machine\n")
    terminal.expect("step 1  run_code denied by alice: not on my machine")
    terminal.expect("You declined the call to run_code: not on my machine")
    assert terminal.exit_code() == 0
    run = the_run(alice)
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == []
    assert list(run.tool_executions.values_list("status", flat=True)) == ["denied"]
    request = run.approvals.get()
    assert (request.decision, request.reason) == (Decision.DENY, "not on my machine")


def test_a_write_is_shown_with_its_path_and_content_and_runs_once_approved(alice, in_a_terminal):
    terminal = in_a_terminal(
        "--user",
        "alice",
        "--model",
        "mock",
        "Save 'buy milk' to notes.txt",
        LOOP_APPROVAL="write_file=ask",
    )
    shown = terminal.expect("write_file: approve, edit or deny? [a/e/d] ")
    assert 'path: "notes.txt"\n  content:\n    buy milk\n' in shown
    assert not (workspace_path(alice.pk) / "notes.txt").exists()
    terminal.type("a\n")
    assert terminal.exit_code() == 0
    assert (workspace_path(alice.pk) / "notes.txt").read_text() == "buy milk"
    assert the_run(alice).tool_executions.get().status == "ok"


def test_ctrl_c_while_asked_leaves_the_run_waiting_and_exits_130(alice, in_a_terminal):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK)
    asked_about_the_call(terminal)
    terminal.type("\x03")
    run = the_run(alice)
    told = terminal.expect("(add --yes to approve every call).")
    assert f"Run {run.pk} waits for a decision on 1 tool call, not run yet." in told
    assert f"`manage.py runagent --resume {run.pk}`" in told
    assert terminal.exit_code() == STOPPED_ASKING_EXIT
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.approvals.get().waiting
    assert runs_of_the_snippet(run) == []


def test_the_end_of_input_while_asked_leaves_the_run_waiting_and_exits_6(alice, in_a_terminal):
    terminal = in_a_terminal("--user", "alice", "--model", "mock", TASK)
    asked_about_the_call(terminal)
    terminal.type("\x04")  # Ctrl-D on an empty line: the terminal's end of input
    terminal.expect("waits for a decision on 1 tool call, not run yet.")
    assert terminal.exit_code() == WAITING_EXIT
    run = the_run(alice)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.approvals.get().waiting


def test_without_a_terminal_the_run_waits_and_resume_yes_works_it_to_its_end(
    alice, without_a_terminal
):
    left = without_a_terminal("--user", "alice", "--model", "mock", TASK)
    assert left.returncode == WAITING_EXIT, left.stdout + left.stderr
    run = the_run(alice)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert "step 1  run_code waits for a decision" in left.stdout
    assert f"Run {run.pk} waits for a decision on 1 tool call, not run yet." in left.stderr
    assert f"`manage.py runagent --resume {run.pk}`" in left.stderr
    assert "on its page" not in left.stderr  # a run of runagent's has no conversation
    assert runs_of_the_snippet(run) == []

    worked = without_a_terminal("--resume", str(run.pk), "--yes")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    assert f"Run {run.pk} waits for a decision on 1 tool call: {TASK}" in worked.stdout
    assert "step 1  run_code approved by alice" in worked.stdout
    assert "17 * 23 = 391" in worked.stdout
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == [CODE]


def test_yes_approves_every_call_and_json_tells_each_decision(alice, without_a_terminal):
    done = without_a_terminal("--user", "alice", "--model", "mock", "--yes", "--json", TASK)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [event["kind"] for event in events]
    asked = kinds.index("approval_requested")
    assert kinds[asked + 1 : asked + 4] == ["approval_decided", "run_resumed", "tool_call_started"]
    assert events[asked + 1]["decision"] == Decision.APPROVE
    assert events[-1]["answer"] == "17 * 23 = 391"
    assert runs_of_the_snippet(the_run(alice)) == [CODE]


def parked_in_a_conversation(user) -> AgentRun:
    """A run of the person's, from the site, waiting for their decision on its run_code call."""
    run = start_run(user, TASK, model="mock", conversation=new_conversation(user))
    run = execute_run(run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    return run


def test_a_waiting_run_from_the_site_names_its_page_then_is_decided_in_a_terminal(
    alice, without_a_terminal, in_a_terminal
):
    run = parked_in_a_conversation(alice)
    left = without_a_terminal("--resume", str(run.pk))
    assert left.returncode == WAITING_EXIT, left.stdout + left.stderr
    assert f"Decide on its page, /c/{run.conversation_id}/, or in a terminal" in left.stderr

    terminal = in_a_terminal("--resume", str(run.pk))
    terminal.expect(f"Run {run.pk} waits for a decision on 1 tool call: {TASK}")
    terminal.expect(f"  code:\n    {CODE}\n")
    terminal.expect(PROMPT)
    terminal.type("yes\n")
    terminal.expect("17 * 23 = 391")
    assert terminal.exit_code() == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == [CODE]


def test_resume_takes_up_a_run_decided_by_a_runagent_that_stopped_before_working_it(
    alice, without_a_terminal
):
    run = parked_in_a_conversation(alice)
    request = run.approvals.get()
    decide(
        alice,
        run.pk,
        [CallDecision(request.call_id, Decision.APPROVE, request.digest)],
        queue_it=False,
    )
    run.refresh_from_db()
    assert (run.status, run.job_id) == (RunStatus.QUEUED, None)  # no worker will take it

    worked = without_a_terminal("--resume", str(run.pk))
    assert worked.returncode == 0, worked.stdout + worked.stderr
    assert f"Taking up run {run.pk} (queued): {TASK}" in worked.stdout
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == [CODE]


def test_each_call_of_a_reply_is_asked_about_in_the_models_order_then_the_batch_runs(
    alice, asking_env, workspaces
):
    """Several calls in one reply (a real model's; the mock makes one): each its own question,
    in the model's order, the run queued for this process once the last is decided."""
    llm = ScriptedLLM(
        [
            calls(("run_code", {"code": "print(1)"}), ("run_code", {"code": "print(2)"})),
            answer("ok"),
        ]
    )
    run = execute_run(start_run(alice, TASK, model="mock"), llm=llm)
    assert run.status == RunStatus.AWAITING_APPROVAL
    typed = iter(["a\n", "d\n", "one is enough\n"])
    shown: list[str] = []
    heard = []
    terminal = Terminal(
        read=lambda: next(typed), write=lambda text, ending=None: shown.append(text)
    )
    decide_here(run, terminal.choose, refused=terminal.refused, then=heard.append)
    asked = [line for line in shown if line.startswith("Run ")]
    first, second = (run.approvals.get(arguments=f'{{"code": "print({n})"}}') for n in (1, 2))
    assert asked == [
        f"Run {run.pk} waits for your decision on run_code ({first.call_id}):",
        f"Run {run.pk} waits for your decision on run_code ({second.call_id}):",
    ]
    assert [(event.call_id, event.decision) for event in heard] == [
        (first.call_id, Decision.APPROVE),
        (second.call_id, Decision.DENY),
    ]
    run.refresh_from_db()
    assert (run.status, run.job_id) == (RunStatus.QUEUED, None)
    run = execute_run(run, llm=llm)
    assert run.status == RunStatus.SUCCEEDED
    assert runs_of_the_snippet(run) == ["print(1)"]


@pytest.mark.django_db(transaction=False)
def test_the_transcript_tells_a_wait_each_decision_and_the_resume_after_them():
    call = {"step": 2, "call_id": "call_1", "tool": "run_code"}
    requested = ApprovalRequested(
        **call, arguments="{}", digest="d", why="The site asks before every run_code call."
    )
    assert describe(requested, 3) == [
        "step 2  run_code waits for a decision: The site asks before every run_code call."
    ]
    lines = [
        describe(ApprovalDecided(**call, decision=decision, by=by, reason=reason), 3)
        for decision, by, reason in [
            (Decision.APPROVE, "alice", ""),
            (Decision.EDIT, "alice", ""),
            (Decision.DENY, "alice", "no"),
            (Decision.EXPIRED, "", ""),  # Loop's, not a person's
        ]
    ]
    assert lines == [
        ["step 2  run_code approved by alice"],
        ["step 2  run_code edited and approved by alice"],
        ["step 2  run_code denied by alice: no"],
        ["step 2  run_code not run: nobody decided in time"],
    ]
    resumed = RunResumed(attempt=2, reason=ResumeReason.DECIDED)
    assert describe(resumed, 3) == ["Resumed: the calls it waited on were decided (attempt 2)."]
