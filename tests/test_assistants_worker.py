"""An assistant's version, worked by a real `manage.py worker`: its asks make a call wait for the
person's decision (nothing else asks here), and once approved the call runs, once."""

import pytest

from agent.runs import submit_first_run
from core.events import RunStatus
from tests.conftest import wait_for
from tests.test_approvals_worker import approve, calls_started, status_of, waits
from tests.test_assistants import made

pytestmark = pytest.mark.django_db(transaction=True)


def test_its_ask_before_makes_the_workers_call_wait(alice, start_worker):
    start_worker()
    asking = made(alice, name="Careful", ask_before=["run_code"])
    run = submit_first_run(alice, "What is 17 * 23?", model="mock", assistant=asking)
    wait_for(lambda: waits(run), "the run to wait for alice's decision")
    assert calls_started(run) == 0
    approve(run)
    wait_for(lambda: status_of(run) == RunStatus.SUCCEEDED, "the run, once approved")
    assert calls_started(run) == 1
    plain = submit_first_run(alice, "What is 17 * 23?", model="mock")
    wait_for(lambda: status_of(plain) == RunStatus.SUCCEEDED, "a run with no assistant")
    assert calls_started(plain) == 1  # nothing asked: the ask was the assistant's
