"""`manage.py runagent`: the live transcript, JSON events, exit codes and Ctrl-C."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.llm.scripted import ScriptedLLM, answer, call
from agent.models import AgentRun
from core.events import RunStatus
from engine import execution
from memory.models import Memory
from tests.conftest import PROJECT_DIR, child_environment

DEMO = "Compute the sum of 1..100 and save it to a file"


def runagent(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("runagent", *args, stdout=out, stderr=StringIO())
        code = 0
    except SystemExit as exit:
        code = exit.code
    return code, out.getvalue()


@pytest.mark.django_db
def test_the_demo_prints_each_step_then_the_answer_and_exits_0(workspaces):
    code, out = runagent(DEMO)
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Task: {DEMO}", "Model: mock"]
    assert lines[2] == 'step 1  run_code {"code": "print(sum(range(1, 100 + 1)))"}'
    assert lines[3].startswith("        run_code ok in ")
    assert "5050" in lines[3]
    assert lines[4] == 'step 2  read_file {"path": "sum.txt"}'
    assert lines[5].startswith("        read_file error in ")
    assert "sum.txt does not exist" in lines[5]
    assert lines[6] == 'step 3  write_file {"path": "sum.txt", "content": "5050\\n"}'
    assert "The sum of 1..100 is 5050. I saved it to sum.txt." in lines
    run = AgentRun.objects.get()
    assert lines[-1].startswith(f"Run {run.pk} succeeded after 4 model turns, 3 tool calls,")
    assert run.user.username == "cli"
    assert run.status == RunStatus.SUCCEEDED


@pytest.mark.django_db
def test_a_run_halted_by_the_breaker_exits_3(workspaces):
    code, out = runagent("Keep reading missing.txt until it exists")
    assert code == 3
    assert "Circuit breaker tripped on read_file (tool_failures)." in out
    assert "halted (tool_failures) after 4 model turns" in out


@pytest.mark.django_db
def test_json_prints_one_event_per_line(workspaces):
    code, out = runagent("What is 17 * 23?", "--json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    run = AgentRun.objects.get()
    assert {event["run"] for event in events} == {run.pk}
    assert events[0]["kind"] == "run_started"
    assert events[-1]["kind"] == "run_finished"
    assert events[-1]["status"] == "succeeded"
    assert events[-1]["answer"] == "17 * 23 = 391"
    assert len(events) == run.events.count()


@pytest.mark.django_db
def test_it_runs_for_the_named_user_with_the_given_cap(workspaces):
    alice = User.objects.create_user("alice")
    code, _ = runagent(
        "Keep reading missing.txt until it exists", "--user=alice", "--max-iterations=2"
    )
    run = AgentRun.objects.get()
    assert run.user == alice
    assert run.halt_reason == "iteration_cap"
    assert code == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["   "], "The task is empty"),
        (["hi", "--user=nobody"], "No user named 'nobody'"),
        (["hi", "--model=llama-3.3-70b-versatile"], "needs GROQ_API_KEY"),
        (["hi", "--max-iterations=0"], "at least 1"),
    ],
)
def test_bad_usage_exits_2_with_a_clear_message_and_records_nothing(args, message, settings):
    settings.GROQ_API_KEY = ""
    with pytest.raises(CommandError, match=message) as raised:
        call_command("runagent", *args, stdout=StringIO())
    assert raised.value.returncode == 2
    assert not AgentRun.objects.exists()


class ThinkingLLM(ScriptedLLM):
    """A model that, at its second turn, thinks until the test is over: `stop()` is sent as it
    starts to, and only a run that stops mid-call ends before it replies."""

    def __init__(self, replies, stop) -> None:
        super().__init__(replies)
        self.stop = stop
        self.done = threading.Event()

    def chat(self, messages, tools, **options):
        if len(self.turns) == 1:
            self.stop()
            self.done.wait(30)  # the test is over: the reply goes to nobody
        return super().chat(messages, tools, **options)


@pytest.mark.django_db
def test_ctrl_c_cancels_the_run_records_it_and_exits_4(workspaces, monkeypatch):
    def ctrl_c() -> None:  # the user presses Ctrl-C while the model thinks
        os.kill(os.getpid(), signal.SIGINT)

    script = [call("list_files", {}), call("list_files", {}), answer("never")]
    llm = ThinkingLLM(script, ctrl_c)
    monkeypatch.setattr(execution, "llm_for", lambda model, **_: llm)
    handler = signal.getsignal(signal.SIGINT)
    code, out = runagent("List my files")
    llm.done.set()
    assert code == 4
    # The turn it was thinking is cut: its calls are neither run nor recorded.
    assert f"Run {AgentRun.objects.get().pk} cancelled after 1 model turn" in out
    run = AgentRun.objects.get()
    assert run.status == RunStatus.CANCELLED
    assert list(run.tool_executions.values_list("status", flat=True)) == ["ok"]
    assert signal.getsignal(signal.SIGINT) is handler  # pytest's own handler is back


@pytest.mark.django_db
def test_sigterm_cancels_the_run_like_ctrl_c(workspaces, monkeypatch):
    def terminate() -> None:  # a supervisor stops the command
        os.kill(os.getpid(), signal.SIGTERM)

    llm = ThinkingLLM([call("list_files", {}), answer("never"), answer("never")], terminate)
    monkeypatch.setattr(execution, "llm_for", lambda model, **_: llm)
    handler = signal.getsignal(signal.SIGTERM)
    code, _ = runagent("List my files")
    llm.done.set()
    assert code == 4
    assert AgentRun.objects.get().status == RunStatus.CANCELLED
    assert signal.getsignal(signal.SIGTERM) is handler


def test_the_command_line_tool_works_end_to_end(manage, child_database_url, workspaces):
    env = {"DATABASE_URL": child_database_url, "LOOP_WORKSPACES_DIR": str(workspaces)}
    done = manage("runagent", DEMO, env=env)
    assert done.returncode == 0, done.stderr
    assert "The sum of 1..100 is 5050. I saved it to sum.txt." in done.stdout
    halted = manage("runagent", "Keep reading missing.txt until it exists", env=env)
    assert halted.returncode == 3
    assert list(AgentRun.objects.order_by("pk").values_list("status", flat=True)) == [
        "succeeded",
        "halted",
    ]
    refused = manage("runagent", "", env=env)
    assert refused.returncode == 2
    assert "The task is empty" in refused.stderr


@pytest.mark.django_db
def test_a_second_run_recalls_the_first_runs_outcome(workspaces):
    runagent(DEMO)
    code, out = runagent("What was the sum of 1..100 that I computed before?")
    assert code == 0
    assert "Recalled 1 memory:\n  memory " in out
    assert "From an earlier run: The sum of 1..100 is 5050. I saved it to sum.txt." in out
    first, second = AgentRun.objects.order_by("pk")
    [event] = second.events.filter(kind="memories_recalled")
    [recalled] = event.data["memories"]
    assert recalled["id"] == Memory.objects.get(source_run_id=first.pk).pk
    assert set(recalled["parts"]) == {"similarity", "recency", "importance"}
    assert recalled["score"] > 0
    # Asked again, with the second run's outcome remembered too, the answer does not echo.
    _, again = runagent("What was the sum of 1..100 that I computed before?")
    assert "From an earlier run: The sum of 1..100 is 5050. I saved it to sum.txt." in again


@pytest.mark.django_db(transaction=True)
def test_the_model_can_remember_a_fact_on_purpose(workspaces):
    code, out = runagent("Remember that my staging server is staging.example.com")
    assert code == 0
    assert 'step 1  remember {"fact": "my staging server is staging.example.com"}' in out
    told = Memory.objects.get(origin="told")
    assert told.text == "my staging server is staging.example.com"
    assert told.owner.username == "cli"
    assert told.source_run_id == AgentRun.objects.get().pk  # which run stored it, for the audit


class SilentModelServer:
    """An OpenAI-compatible server on 127.0.0.1 that takes each request and never answers: a
    model call to it hangs until the client gives up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.asked = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.listener.accept()
                self.held.append(connection)
                if b"/chat/completions" in connection.recv(65536):
                    self.asked.set()

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.mark.serial
def test_ctrl_c_stops_runagent_in_the_middle_of_a_model_call(
    child_database_url, workspaces, settings
):
    server = SilentModelServer()
    env = child_environment(
        DATABASE_URL=child_database_url,
        LOOP_WORKSPACES_DIR=str(workspaces),
        LOOP_OPENAI_BASE_URL=server.base_url,
        LOOP_OPENAI_MODEL="llama3.1:8b",
        LOOP_OPENAI_TIMEOUT="300",  # the call would hang for minutes but for the stop
        GROQ_API_KEY="",
    )
    command = [sys.executable, "manage.py", "runagent", "Say hello", "--model=openai:llama3.1:8b"]
    child = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.asked.wait(60), "the model was never asked"
        child.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        out, _ = child.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        child.kill()
        server.close()
    assert child.returncode == 4  # cancelled (Ctrl-C), as the command's help says
    assert took < 5, f"it took {took:.1f}s to stop"
    run = AgentRun.objects.get()
    assert run.status == RunStatus.CANCELLED
    assert f"Run {run.pk} cancelled after 0 model turns" in out
    assert run.events.last().kind == "run_finished"
    assert run.answer == "Stopped before a final answer."  # its progress: none yet
