"""A forgotten memory's text is taken out of its owner's runs however the log quotes it: as it
is, inside a tool call's JSON arguments (non-ASCII escaped or not), and only as whole words."""

import json

import pytest

from agent.forgotten import FORGOTTEN, unquote
from agent.models import AgentRun, RunEvent, ToolExecution

pytestmark = pytest.mark.django_db

TEXT = 'Zoë says "the door code is 4711"'


def run_of(user, **fields) -> AgentRun:
    return AgentRun.objects.create(
        user=user, task="a task", provider="mock", model="mock", **fields
    )


def event(run: AgentRun, seq: int, data: dict) -> RunEvent:
    RunEvent.objects.append(run.pk, seq, "model_replied", 1, data)
    return RunEvent.objects.get(run=run, seq=seq)


@pytest.mark.parametrize("ascii_only", [True, False])
def test_every_way_a_log_quotes_the_text_is_taken_out(alice, ascii_only):
    run = run_of(alice, answer=f"You said: {TEXT}.")
    arguments = json.dumps({"fact": TEXT}, ensure_ascii=ascii_only)
    quoted = event(
        run, 1, {"text": TEXT, "tool_calls": [{"name": "remember", "arguments": arguments}]}
    )
    execution = ToolExecution.objects.create(
        run=run, step=1, call_id="c1", tool="remember", arguments=arguments, status="ok",
        result=TEXT, duration=0.1,
    )  # fmt: skip
    assert unquote(alice, [TEXT]) == 3
    quoted.refresh_from_db()
    assert quoted.data["text"] == FORGOTTEN
    assert json.loads(quoted.data["tool_calls"][0]["arguments"]) == {"fact": FORGOTTEN}
    execution.refresh_from_db()
    assert (json.loads(execution.arguments), execution.result) == ({"fact": FORGOTTEN}, FORGOTTEN)
    run.refresh_from_db()
    assert run.answer == f"You said: {FORGOTTEN}."


def test_only_whole_words_and_only_the_owner_s_runs(alice, bob):
    mine = event(run_of(alice), 1, {"text": "teal; steal; teal."})
    theirs = event(run_of(bob), 1, {"text": "teal"})
    unquote(alice, ["teal"])
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.data["text"] == f"{FORGOTTEN}; steal; {FORGOTTEN}."
    assert theirs.data["text"] == "teal"
