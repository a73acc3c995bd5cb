"""A tool call's name and id are the model's data: any length is recorded, bounded, and answered
as an unknown tool, and the run goes on (issue 25, finding 7)."""

import pytest

from agent.llm.scripted import ScriptedLLM, answer, calls
from agent.runs import start_run
from core.events import RunStatus
from core.llm import CALL_ID_CHARS, TOOL_NAME_CHARS, Reply, ToolCall
from core.results import ToolStatus
from engine.execution import execute_run

pytestmark = pytest.mark.django_db

LONG = "x" * 300
HUGE = "y" * 10_000


def test_a_name_of_any_length_is_an_unknown_tool_and_the_run_goes_on(alice, workspaces):
    llm = ScriptedLLM([calls((LONG, {}), (HUGE, {})), answer("I will use the real tools.")])
    run = execute_run(start_run(alice, "Do it", model="mock"), llm=llm)

    assert (run.status, run.error) == (RunStatus.SUCCEEDED, "")
    assert run.answer == "I will use the real tools."
    executions = list(run.tool_executions.order_by("pk"))
    assert [len(e.tool) for e in executions] == [TOOL_NAME_CHARS, TOOL_NAME_CHARS]
    assert [e.tool[:40] for e in executions] == ["x" * 40, "y" * 40]
    assert [e.tool.rsplit("…", 1)[1] for e in executions] == ["[300 chars]", "[10000 chars]"]
    assert {e.status for e in executions} == {ToolStatus.ERROR}
    for execution in executions:
        assert execution.error.startswith(f"Unknown tool {execution.tool!r}. Available tools:")
    finished = run.events.filter(kind="tool_call_finished").order_by("seq")
    assert [event.data["tool"] for event in finished] == [e.tool for e in executions]
    assert not any(HUGE in str(event.data) for event in run.events.all())
    # The model read each failure, naming the tool as recorded, and answered after it.
    results = [m["content"] for m in llm.turns[1][0] if m["role"] == "tool"]
    assert results == [f"ERROR: {e.error}" for e in executions]


def test_an_id_of_any_length_is_recorded_bounded_and_kept_distinct(alice, workspaces):
    ids = ("c" * 5_000 + "1", "c" * 5_000 + "2")
    reply = Reply(tool_calls=tuple(ToolCall(each, "list_files", "{}") for each in ids))

    class SameIds(ScriptedLLM):
        def chat(self, messages, tools, **options):  # the ids exactly as sent, not renamed
            self.turns.append((list(messages), tools))
            return reply if len(self.turns) == 1 else answer("Listed.")

    run = execute_run(start_run(alice, "List", model="mock"), llm=SameIds([]))
    assert run.status == RunStatus.SUCCEEDED
    recorded = list(run.tool_executions.values_list("call_id", "status"))
    assert [status for _, status in recorded] == [ToolStatus.OK, ToolStatus.OK]
    assert len({call_id for call_id, _ in recorded}) == 2
    assert all(len(call_id) <= CALL_ID_CHARS for call_id, _ in recorded)
