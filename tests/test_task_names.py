"""A queued job names its task by a string stored in the database: the engine moved from agent/
to engine/ (issue 26), and jobs queued before the move must still find their task."""

import pytest
from procrastinate.contrib.django import app

pytestmark = pytest.mark.fast

# The names jobs already in the queue carry; a rename strands them.
STORED_NAMES = {
    "agent.work_run",
    "agent.recover_runs",
    "memory.purge_forgotten_texts",
    "agent.prune_old_records",
    "agent.expire_waiting_calls",
}


def test_every_task_a_queued_job_may_name_is_registered_under_its_stored_name():
    assert set(app.tasks) >= STORED_NAMES


def test_no_task_is_named_after_the_module_that_defines_it():
    """Procrastinate's default name is the function's dotted path, which moves with the code."""
    assert not [name for name in app.tasks if name.startswith(("engine.", "agent.tasks."))]
