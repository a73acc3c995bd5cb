"""Runs as Django tasks, worked by `manage.py db_worker` processes apart from the web server."""

import signal

import pytest

from agent.events import RunStatus
from agent.models import AgentRun
from agent.services import cancel_run, new_conversation, submit_run
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def status_of(run: AgentRun) -> str:
    run.refresh_from_db()
    return run.status


def test_a_submitted_run_returns_queued_and_a_worker_works_it(alice, manage, worker_env):
    run = submit_run(alice, "What is 17 * 23?", new_conversation(alice), model="mock")
    assert run.status == RunStatus.QUEUED
    worked = manage("db_worker", "--batch", "--no-reload", env=worker_env)
    assert worked.returncode == 0, worked.stderr
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.SUCCEEDED, "17 * 23 = 391")


def test_stop_from_this_process_ends_the_run_in_the_worker_cancelled(alice, start_worker):
    run = submit_run(alice, "Count slowly to 8", new_conversation(alice), model="mock")
    start_worker()
    wait_for(lambda: run.events.filter(kind="tool_call_finished").exists(), "the first step")
    cancel_run(alice, run.pk)
    wait_for(lambda: status_of(run) == RunStatus.CANCELLED, "the run to be cancelled")
    assert run.tool_executions.count() < 8


def test_stopping_the_worker_records_the_run_as_interrupted_with_its_progress(alice, start_worker):
    run = submit_run(alice, "Count slowly to 8", new_conversation(alice), model="mock")
    worker = start_worker()
    wait_for(lambda: run.events.filter(kind="tool_call_finished").exists(), "the first step")
    worker.send_signal(signal.SIGTERM)
    output, _ = worker.communicate(timeout=60)
    assert status_of(run) == RunStatus.INTERRUPTED, output
    assert run.error == "The process running it stopped (WorkerStopping)."
    assert run.events.last().kind == "run_finished"
