"""Runs worked by real `manage.py worker` processes: many at once, handed back at a stop, resumed
by another worker when theirs is killed, and the supervisor that starts a dead worker again.

The model is the keyless mock, or, where a test needs a tool call or a model turn that lasts,
the fake Groq server (tests/groq_server.py) scripted to ask for it: the network edge is the only
fake. Each tool call appends its own line to a file in the workspace, so a call run twice shows.
"""

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from procrastinate.contrib.django.models import ProcrastinateJob

from agent.models import FINISHED, AgentRun
from agent.queue import WORK_RUN
from agent.runs import cancel_run, new_conversation, request_cancel, submit_run
from approvals.decisions import decide
from approvals.models import ApprovalPreference
from approvals.waiting import CallDecision
from core.events import Decision, ResumeReason, RunStatus
from core.history import INTERRUPTED_CALL
from tests.conftest import PROJECT_DIR, OutputLines, children, wait_for
from tests.groq_server import (  # noqa: F401 (the fixture)
    CHAT_COMPLETIONS_PATH,
    FakeGroqServer,
    RecordedRequest,
    groq_server_fixture,
    tool_call,
)

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai/gpt-oss-120b"
# A dead worker's runs are resumed this soon (its heartbeat goes every second).
STALE = {"LOOP_STALE_SECONDS": "3"}
LEDGER = "calls.txt"
TASK = "Do the three steps"


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def appending(mark: str, *, then: str = "") -> dict:
    """run_code's arguments for a snippet that appends `mark` to the ledger, then runs `then`."""
    code = f"with open({LEDGER!r}, 'a') as ledger:\n    ledger.write({mark + chr(10)!r})\n{then}"
    return {"code": code}


def call(mark: str, *, then: str = "") -> dict:
    return tool_call("run_code", appending(mark, then=then), id=f"call_{mark}")


LONG_CALL = "import time\ntime.sleep(30)\n"
MANAGE = PROJECT_DIR / "manage.py"


@pytest.fixture
def on_groq(settings, groq_server, worker_env) -> dict[str, str]:
    """The fake Groq server as the model, here and in the workers (the environment they get)."""
    settings.GROQ_API_KEY = "gsk_test_key"
    settings.GROQ_BASE_URL = groq_server.base_url
    settings.LOOP_GROQ_MODEL = MODEL
    return {
        "GROQ_API_KEY": "gsk_test_key",
        "GROQ_BASE_URL": groq_server.base_url,
        "LOOP_GROQ_MODEL": MODEL,
        "LOOP_GROQ_REASONING_EFFORT": "low",
        "LOOP_GROQ_MAX_RETRIES": "0",
        **STALE,
    }


def ledger(workspaces: Path, run: AgentRun) -> Counter[str]:
    path = workspaces / str(run.user_id) / LEDGER
    return Counter(path.read_text().split()) if path.exists() else Counter()


def started(run: AgentRun, call_id: str) -> bool:
    return run.events.filter(kind="tool_call_started", data__call_id=call_id).exists()


def executions(run: AgentRun) -> Counter[str]:
    return Counter(run.tool_executions.values_list("call_id", flat=True))


def finishes(run: AgentRun) -> Counter[str]:
    return Counter(e.data["call_id"] for e in run.events.filter(kind="tool_call_finished"))


def resumes(run: AgentRun) -> list[dict]:
    return [e.data for e in run.events.filter(kind="run_resumed").order_by("seq")]


def handed_back(run: AgentRun) -> bool:
    """The run's job is queued again, for whichever worker comes next."""
    return ProcrastinateJob.objects.filter(
        task_name=WORK_RUN, args__run_id=run.pk, status="todo"
    ).exists()


def model_turns(groq_server: FakeGroqServer) -> list[RecordedRequest]:
    return [r for r in groq_server.requests if r.path == CHAT_COMPLETIONS_PATH]


def stopped(worker: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = worker.communicate(timeout=60)
    return worker.returncode, output


def test_a_submitted_run_is_worked_by_a_worker_process(alice, start_worker):
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    start_worker()

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the run to succeed")
    assert run.answer == "17 * 23 = 391"


def test_a_stop_from_another_process_ends_the_run_in_the_worker_cancelled(alice, start_worker):
    run = submit_run(alice, "Count slowly to 8", new_conversation(alice), model="mock")
    start_worker()
    wait_for(lambda: run.events.filter(kind="tool_call_finished").exists(), "the first step")

    cancel_run(alice, run.pk)

    wait_for(lambda: status_of(run) == RunStatus.CANCELLED, "the run to be cancelled")
    assert run.tool_executions.count() < 8
    assert run.events.last().kind == "run_finished"


@pytest.mark.serial
def test_sixteen_runs_on_one_worker_are_all_running_at_one_moment(
    alice, django_user_model, start_worker
):
    start_worker("--concurrency", "16", LOOP_MOCK_LATENCY_MS="500")
    # A worker's first run loads what all its runs share (the embedder); the sixteen come after.
    first = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    wait_for(lambda: status_of(first) == RunStatus.SUCCEEDED, "the first run to succeed")
    people = [django_user_model.objects.create_user(f"person-{n}") for n in range(16)]
    task = "Count slowly to 3"
    runs = [submit_run(p, task, new_conversation(p), model="mock") for p in people]

    wait_for(
        lambda: all(status_of(run) == RunStatus.SUCCEEDED for run in runs),
        "all 16 runs to succeed",
        timeout=180,
    )
    spans = [run.events.order_by("seq").values_list("created_at", flat=True) for run in runs]
    firsts, lasts = [span.first() for span in spans], [span.last() for span in spans]
    # Every run had started before any had finished: 16 at once, not waves of a smaller pool.
    assert max(firsts) < min(lasts)


def test_a_stopped_worker_hands_its_run_back_mid_call_and_another_resumes_it(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then=LONG_CALL)])
    groq_server.reply("Done: the second step was cut off, so I stopped there.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the 30-second call to start")

    first.send_signal(signal.SIGTERM)
    first.send_signal(signal.SIGINT)  # a second signal, as a second Ctrl-C would be
    status, output = stopped(first)

    # 0 only if every run was handed back within the worker's deadline (else it exits 1).
    assert status == 0, output
    assert "Traceback" not in output, output
    assert handed_back(run)
    start_worker(**on_groq)
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run to succeed")
    [resumed] = resumes(run)
    assert resumed["reason"] == ResumeReason.HANDED_BACK
    cut_off = model_turns(groq_server)[-1].messages[-1]
    assert cut_off["tool_call_id"] == "call_second"
    assert INTERRUPTED_CALL in cut_off["content"]
    assert ledger(workspaces, run)["first"] == 1
    assert ledger(workspaces, run)["second"] <= 1
    assert executions(run)["call_first"] == 1
    assert max(executions(run).values()) == 1
    assert finishes(run) == {"call_first": 1, "call_second": 1}


def test_a_killed_worker_s_run_is_resumed_by_another_mid_tool_call(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then=LONG_CALL)])
    groq_server.reply(tool_calls=[call("third")])
    groq_server.reply("All three steps ran; the second was cut off.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the 30-second call to start")

    first.kill()
    stopped(first)
    start_worker(**on_groq)

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run to succeed")
    [resumed] = resumes(run)
    assert resumed["reason"] == ResumeReason.WORKER_LOST
    assert str(first.pid) in resumed["lost_worker"]
    marks = ledger(workspaces, run)
    assert (marks["first"], marks["third"]) == (1, 1)
    assert marks["second"] <= 1
    assert executions(run)["call_first"] == executions(run)["call_third"] == 1
    assert max(executions(run).values()) == 1
    assert finishes(run) == {"call_first": 1, "call_second": 1, "call_third": 1}
    second = run.events.get(kind="tool_call_finished", data__call_id="call_second")
    assert second.data["status"] == "interrupted"


def test_a_killed_worker_s_run_is_resumed_by_another_mid_model_turn(
    alice, on_groq, groq_server, start_worker, workspaces
):
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply("never heard: its worker is killed first", delay=30)
    groq_server.reply("The step ran once.")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: len(model_turns(groq_server)) == 2, "the second model turn to be asked")

    first.kill()
    stopped(first)
    start_worker(**on_groq)

    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the resumed run to succeed")
    assert run.answer == "The step ran once."
    [resumed] = resumes(run)
    assert resumed["reason"] == ResumeReason.WORKER_LOST
    # The turn in flight is asked again, with the same conversation.
    asked, asked_again = model_turns(groq_server)[1:]
    assert asked_again.messages == asked.messages
    assert ledger(workspaces, run) == {"first": 1}
    assert executions(run) == {"call_first": 1}


def test_a_stop_while_a_killed_worker_s_run_waits_for_another_ends_it_when_claimed(
    alice, on_groq, groq_server, start_worker, workspaces, settings
):
    """The Stop comes while nobody works the run: its worker was killed and the next has not
    taken it yet. Its abort goes to the dead worker's job; the next worker's claim reads it
    from the run: no further model turn or tool call, `cancelled`, the steps before kept."""
    # This process never judges the dead worker gone by its heartbeat: the Stop is only recorded.
    settings.LOOP_STALE_SECONDS = 600
    groq_server.reply(tool_calls=[call("first")])
    groq_server.reply(tool_calls=[call("second", then=LONG_CALL)])
    groq_server.reply(tool_calls=[call("third")])
    groq_server.reply("never heard: the run was stopped")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    first = start_worker(**on_groq)
    wait_for(lambda: started(run, "call_second"), "the 30-second call to start")
    first.kill()
    stopped(first)
    asked = len(model_turns(groq_server))

    cancel_run(alice, run.pk)
    assert status_of(run) == RunStatus.RUNNING  # recorded; no worker heard it
    start_worker(**on_groq)

    wait_for(lambda: status_of(run) in FINISHED, "the run, taken up again, to end")
    assert run.status == RunStatus.CANCELLED
    assert len(model_turns(groq_server)) == asked
    assert not started(run, "call_third")
    assert ledger(workspaces, run)["third"] == 0
    assert executions(run)["call_first"] == 1
    assert [r["reason"] for r in resumes(run)] == [ResumeReason.WORKER_LOST]
    second = run.events.get(kind="tool_call_finished", data__call_id="call_second")
    assert second.data["status"] == "interrupted"
    ended = run.events.last()
    assert (ended.kind, ended.data["status"]) == ("run_finished", RunStatus.CANCELLED)
    assert ended.data["ok_tool_calls"] == 1  # the first step, kept in its account


def test_a_stop_read_before_a_decision_reaches_the_worker_that_took_the_run_since(
    alice, on_groq, groq_server, start_worker
):
    """The Stop's request read the run while it waited for a decision, with no job; the
    decision queued it, and a worker took it before the Stop was recorded. The Stop goes to the
    job the run has once it is recorded: that worker stops the approved call, the run ends
    cancelled, and the model is not asked again."""
    ApprovalPreference.objects.create(user=alice, ask_run_code=True)
    groq_server.reply(tool_calls=[call("approved", then=LONG_CALL)])
    groq_server.reply("never heard: the run was stopped")
    run = submit_run(alice, TASK, new_conversation(alice), model=MODEL)
    start_worker(**on_groq)
    wait_for(lambda: status_of(run) == RunStatus.AWAITING_APPROVAL, "the run to wait")
    read_by_the_stop = AgentRun.objects.get(pk=run.pk)
    request = run.approvals.get()
    decide(alice, run.pk, [CallDecision(request.call_id, Decision.APPROVE, request.digest)])
    wait_for(lambda: started(run, "call_approved"), "the approved call to start")

    request_cancel(read_by_the_stop)

    wait_for(lambda: status_of(run) in FINISHED, "the run to end")
    assert run.status == RunStatus.CANCELLED
    assert len(model_turns(groq_server)) == 1
    approved = run.events.get(kind="tool_call_finished", data__call_id="call_approved")
    assert approved.data["stopped"]


def supervised(supervisor: int) -> int | None:
    """The pid of the `manage.py worker` the supervisor runs now, if it runs one."""
    worker = [str(MANAGE), "worker"]
    return next((pid for pid, argv in children(supervisor).items() if argv[1:3] == worker), None)


def test_a_supervised_worker_that_is_killed_is_started_again(alice, start_worker):
    supervisor = start_worker("--supervise")
    killed = []
    for _ in range(2):  # the second time within a minute of the first: it waits longer
        worker = wait_for(
            lambda: (child := supervised(supervisor.pid)) not in (None, *killed) and child,
            "the supervised worker to start",
        )
        os.kill(worker, signal.SIGKILL)
        killed.append(worker)
    again = wait_for(
        lambda: (child := supervised(supervisor.pid)) not in (None, *killed) and child,
        "the worker to be started again",
    )

    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the new worker to work a run")
    assert supervised(supervisor.pid) == again
    supervisor.terminate()
    status, output = stopped(supervisor)
    assert status == 0, output
    first, second = killed
    assert f"The worker (pid {first}) was killed by SIGKILL; starting it again at once" in output
    assert f"The worker (pid {second}) was killed by SIGKILL; starting it again in 1 s" in output


def test_a_worker_that_cannot_reach_its_database_waits_for_it_and_stops_when_told(
    start_worker, tmp_path
):
    nowhere = f"postgresql://loop@/loop?host={tmp_path}"
    worker = start_worker(DATABASE_URL=nowhere)
    lines = OutputLines(worker)

    wait_for(lambda: lines.count("the database is unreachable") >= 2, "two tries to connect")
    worker.terminate()

    assert worker.wait(timeout=60) == 0, lines.text
    assert "Traceback" not in lines.text, lines.text
    assert "starting again in 1 s" in lines.text
    assert "starting again in 2 s" in lines.text
